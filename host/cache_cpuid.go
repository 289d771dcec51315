package host

import (
	"errors"
	"fmt"
)

// CacheFacts are one CPU's data cache sizes and where they came from. Sysfs
// is the kernel's description and is preferred; a guest whose CPUID lacks
// the deterministic cache leaves (an AMD guest without TOPOEXT) has no sysfs
// caches, and CPUID's legacy leaves then give sizes only, some of which a
// hypervisor makes up. A size left 0 is not known: nothing is computed at it.
type CacheFacts struct {
	Caches
	// Source says where the sizes came from: "sysfs", or the CPUID leaves.
	Source string `json:"source"`
	// Sharing is whether the source says which CPUs share each cache (sysfs
	// and the deterministic leaves do; the legacy leaves do not).
	Sharing bool `json:"sharing"`
	// Untrusted names what the source gave but is not used, and why.
	Untrusted string `json:"untrusted,omitempty"`
}

// errNoCPUIDCaches: CPUID describes no cache here.
var errNoCPUIDCaches = errors.New("CPUID describes no caches")

// DecodeCPUIDCaches reads the data caches CPUID describes, as the kernel's
// cacheinfo does: Intel's leaf 4 and AMD's 0x8000001D (only with TOPOEXT,
// Fn8000_0001 ECX[22]) give each cache's level, size (ways × partitions ×
// line × sets) and sharing; without them AMD's legacy Fn8000_0005 ECX[31:24]
// (L1d KiB) and Fn8000_0006 ECX[31:16] (L2 KiB) give sizes only. Their L3
// field (EDX[31:18], 512 KiB units) is not used: a hypervisor may fill it
// with the whole package's L3 or a made-up size (508 MiB on one of this
// project's EPYC guests), and no sharing says what a CPU sees of it.
func DecodeCPUIDCaches(vendor string, cpuid CPUIDFunc) (CacheFacts, error) {
	if cpuid == nil {
		return CacheFacts{}, fmt.Errorf("%w: no CPUID on this architecture", errNoCPUIDCaches)
	}
	switch vendor {
	case "GenuineIntel":
		if cpuid(0, 0)[0] >= 4 {
			if f, ok := deterministicCaches(cpuid, 4); ok {
				return f, nil
			}
		}
		return CacheFacts{}, fmt.Errorf("%w: CPUID leaf 4 lists none", errNoCPUIDCaches)
	case "AuthenticAMD", "HygonGenuine":
		maxExt := cpuid(0x80000000, 0)[0]
		if maxExt >= 0x8000001D && cpuid(0x80000001, 0)[2]&(1<<22) != 0 {
			if f, ok := deterministicCaches(cpuid, 0x8000001D); ok {
				return f, nil
			}
		}
		if maxExt < 0x80000006 {
			return CacheFacts{}, fmt.Errorf("%w: no TOPOEXT and no leaf 0x80000006", errNoCPUIDCaches)
		}
		var f CacheFacts
		f.L1d = uint64(cpuid(0x80000005, 0)[2]>>24) << 10
		l2 := cpuid(0x80000006, 0)
		f.L2 = uint64(l2[2]>>16) << 10
		if f.L1d == 0 && f.L2 == 0 {
			return CacheFacts{}, fmt.Errorf("%w: no TOPOEXT, and leaves 0x80000005/6 give no sizes", errNoCPUIDCaches)
		}
		f.LLCLevel, f.LLC = 1, f.L1d
		if f.L2 != 0 {
			f.LLCLevel, f.LLC = 2, f.L2
		}
		f.Source = "CPUID 0x80000005/0x80000006 (legacy leaves: sizes without sharing; no TOPOEXT)"
		if l3 := uint64(l2[3]>>18) * 512 << 10; l3 != 0 {
			// What the last level is, is not known: LLC stays L2's only
			// as the largest size known; Untrusted says so.
			f.LLC, f.LLCLevel = 0, 3
			f.Untrusted = fmt.Sprintf("L3 %d KiB from 0x80000006 EDX: package-wide or made up by the hypervisor, and shared by CPUs no leaf names", l3>>10)
		}
		return f, nil
	}
	return CacheFacts{}, fmt.Errorf("%w: no cache leaves known for vendor %q", errNoCPUIDCaches, vendor)
}

// deterministicCaches walks leaf's subleaves (4 or 0x8000001D, the same
// layout) until a null cache type.
func deterministicCaches(cpuid CPUIDFunc, leaf uint32) (CacheFacts, bool) {
	var f CacheFacts
	for sub := uint32(0); sub < 16; sub++ {
		r := cpuid(leaf, sub)
		typ, level := r[0]&0x1f, int(r[0]>>5&7)
		if typ == 0 {
			break
		}
		if typ == 2 { // instruction cache
			continue
		}
		size := uint64(r[1]>>22+1) * uint64(r[1]>>12&0x3ff+1) * uint64(r[1]&0xfff+1) * uint64(r[2]+1)
		switch level {
		case 1:
			f.L1d = size
		case 2:
			f.L2 = size
		}
		if level > f.LLCLevel {
			f.LLCLevel, f.LLC = level, size
		}
	}
	f.Source, f.Sharing = fmt.Sprintf("CPUID leaf %#x", leaf), true
	return f, f.LLCLevel > 0
}

// ReadCPUIDCaches decodes the caches of the CPU this thread runs on.
func ReadCPUIDCaches(vendor string) (CacheFacts, error) {
	return DecodeCPUIDCaches(vendor, cpuidFunc)
}

// ReadCacheFacts is cpu's caches from sysfs, or where sysfs describes none,
// from cpuid (which must run on cpu: kernel/cpubind), labelled with their
// source; an error says why neither knows them.
func ReadCacheFacts(sysfs string, cpu int, vendor string, cpuid func(vendor string) (CacheFacts, error)) (CacheFacts, error) {
	c, err := CacheSizes(sysfs, cpu)
	if err == nil && c.LLCLevel > 0 {
		return CacheFacts{Caches: c, Source: "sysfs", Sharing: true}, nil
	}
	if err == nil {
		err = fmt.Errorf("cpu%d's cache/ lists no data or unified cache", cpu)
	}
	if cpuid == nil {
		return CacheFacts{}, fmt.Errorf("sysfs: %w; and no CPUID reader", err)
	}
	f, cerr := cpuid(vendor)
	if cerr != nil {
		return CacheFacts{}, fmt.Errorf("sysfs: %w; %w", err, cerr)
	}
	return f, nil
}
