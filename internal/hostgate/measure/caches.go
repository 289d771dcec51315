package main

import (
	"fmt"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/host"
	"github.com/pmu-exporter/pmu_exporter/internal/hostgate"
)

// caches is one judge's description of CPU 0's data caches.
type caches struct {
	known, present bool
	l1d, llc       uint64
	llcLevel       int
	proof          string
}

func (c caches) finding() hostgate.Finding {
	return hostgate.Finding{Known: c.known, Present: c.present, Proof: c.proof}
}

// sysfsCaches reads CPU 0's caches as the exporter does (host.CacheSizes,
// host.LLCDomains).
func sysfsCaches() caches {
	c, err := host.CacheSizes("/sys", 0)
	if err != nil {
		return caches{known: true, proof: "sysfs: " + err.Error()}
	}
	if c.LLCLevel == 0 {
		return caches{known: true, proof: "sysfs lists no data or unified cache of cpu0"}
	}
	domain, _ := host.NewLLCDomains("/sys").Of(0)
	return caches{known: true, present: true, l1d: c.L1d, llc: c.LLC, llcLevel: c.LLCLevel,
		proof: fmt.Sprintf("sysfs: cpu0 L1d %s, L%d %s, last-level domain %s", kib(c.L1d), c.LLCLevel, kib(c.LLC), domain)}
}

// cpuidCaches reads the deterministic cache leaves the kernel describes
// caches from: AMD's 0x8000001D (only where 0x80000001 advertises
// TOPOEXT), Intel's leaf 4.
func cpuidCaches(l cpuidLeaves) caches {
	if l.CPUIDLeaves == nil {
		return caches{proof: "no cpuid tool or not x86: no oracle for the caches"}
	}
	vendor := l.vendor()
	leaf := uint32(4)
	switch vendor {
	case "AuthenticAMD", "HygonGenuine":
		if l.get(0x80000001, 0)[2]&(1<<22) == 0 {
			return legacyCaches(l, vendor)
		}
		leaf = 0x8000001D
	case "GenuineIntel":
		if l.get(0, 0)[0] < 4 {
			return caches{known: true, proof: "CPUID's highest leaf is below 4: no deterministic cache leaf"}
		}
	default:
		return caches{proof: "CPUID vendor " + vendor + ": no known cache leaf"}
	}
	c := caches{known: true}
	var seen []string
	for sub := uint32(0); sub < 16; sub++ {
		r := l.get(leaf, sub)
		typ, level := r[0]&0x1f, int(r[0]>>5&7)
		if typ == 0 {
			break
		}
		if typ == 2 { // instruction
			continue
		}
		size := uint64(r[1]>>22+1) * uint64(r[1]>>12&0x3ff+1) * uint64(r[1]&0xfff+1) * uint64(r[2]+1)
		seen = append(seen, fmt.Sprintf("L%d %s", level, kib(size)))
		c.present = true
		if level == 1 {
			c.l1d = size
		}
		if level > c.llcLevel {
			c.llcLevel, c.llc = level, size
		}
	}
	if !c.present {
		c.proof = fmt.Sprintf("CPUID leaf %#x describes no data or unified cache", leaf)
		return c
	}
	c.proof = fmt.Sprintf("CPUID leaf %#x: %s", leaf, strings.Join(seen, ", "))
	return c
}

// legacyCaches: an AMD CPU without TOPOEXT has only the legacy leaves
// 0x80000005/6, sizes without sharing. Whether the kernel describes caches
// from them (its amd_cpuid4 emulation of leaf 4) depends on its version
// and the CPU's family: Debian's 6.1 does on QEMU's family 15, this pool's
// 6.18 does not on an EPYC guest (family 26). So they cannot tell whether
// sysfs should describe caches, only, where it does, what their L1d is.
func legacyCaches(l cpuidLeaves, vendor string) caches {
	l1d := uint64(l.get(0x80000005, 0)[2]>>24) << 10
	l2 := uint64(l.get(0x80000006, 0)[2]>>16) << 10
	return caches{l1d: l1d, proof: fmt.Sprintf("CPUID (%s) does not advertise TOPOEXT (0x80000001 ecx bit 22), so no leaf 0x8000001D; the legacy leaves 0x80000005/6 give L1d %s and L2 %s, from which some kernels describe caches and others do not",
		vendor, kib(l1d), kib(l2))}
}

// cacheConflict: both describe caches, of other sizes (the legacy leaves:
// another L1d).
func cacheConflict(sys, id caches) string {
	if !sys.present || id.l1d == 0 && !id.present {
		return ""
	}
	if sys.l1d != id.l1d || id.present && (sys.llc != id.llc || sys.llcLevel != id.llcLevel) {
		return fmt.Sprintf("sysfs has L1d %s and L%d %s, CPUID L1d %s and L%d %s",
			kib(sys.l1d), sys.llcLevel, kib(sys.llc), kib(id.l1d), id.llcLevel, kib(id.llc))
	}
	return ""
}

// cpuidSMT: threads per core from leaf 0xB's SMT level, else AMD's
// 0x8000001E (with TOPOEXT).
func cpuidSMT(l cpuidLeaves) hostgate.Finding {
	if l.CPUIDLeaves == nil {
		return hostgate.Finding{Proof: "no cpuid tool or not x86: no oracle for SMT"}
	}
	if l.get(0, 0)[0] >= 0xb {
		if r := l.get(0xb, 0); r[2]>>8&0xff == 1 {
			n := r[1] & 0xffff
			return hostgate.Finding{Known: true, Present: n > 1, Proof: fmt.Sprintf("CPUID leaf 0xB: %d logical processors per core", n)}
		}
	}
	if l.get(0x80000001, 0)[2]&(1<<22) != 0 {
		n := l.get(0x8000001e, 0)[1]>>8&0xff + 1
		return hostgate.Finding{Known: true, Present: n > 1, Proof: fmt.Sprintf("CPUID 0x8000001E: %d threads per core", n)}
	}
	return hostgate.Finding{Proof: "CPUID has neither leaf 0xB's SMT level nor TOPOEXT"}
}

func kib(n uint64) string { return fmt.Sprintf("%d KiB", n>>10) }
