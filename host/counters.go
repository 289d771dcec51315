package host

// Counters is how many hardware counters each logical CPU has, from CPUID. The
// kernel does not publish these in sysfs, and tools like toplev read CPUID too.
type Counters struct {
	GeneralPurpose int    `json:"general_purpose"`
	Fixed          int    `json:"fixed"`
	Known          bool   `json:"known"`
	Source         string `json:"source"` // which CPUID leaf, or why unknown
}

// CPUIDFunc executes CPUID with eax=leaf, ecx=sub and returns eax, ebx, ecx, edx.
type CPUIDFunc func(leaf, sub uint32) [4]uint32

// DecodeCounters reads the counter counts the CPU advertises.
//
// Intel (SDM vol. 2A, CPUID leaf 0AH): EAX[15:8] general-purpose counters per
// logical processor; EDX[4:0] fixed-function counters when EAX[7:0] (version) > 1.
// AMD (APM vol. 3, CPUID Fn8000_0022 with PerfMonV2): EBX[3:0] NumPerfCtrCore;
// without it, Fn8000_0001 ECX[23] PerfCtrExtCore means 6 core counters, else the
// legacy 4. A hypervisor that hides PerfCtrExtCore usually exposes no PMU at all.
func DecodeCounters(vendor string, cpuid CPUIDFunc) Counters {
	if cpuid == nil {
		return Counters{Source: "CPUID is not available on this architecture"}
	}
	switch vendor {
	case "GenuineIntel":
		if cpuid(0, 0)[0] < 0xA {
			return Counters{Source: "CPUID leaf 0xA not supported"}
		}
		r := cpuid(0xA, 0)
		version := r[0] & 0xff
		c := Counters{GeneralPurpose: int(r[0] >> 8 & 0xff), Known: version > 0, Source: "CPUID.0AH"}
		if version > 1 {
			c.Fixed = int(r[3] & 0x1f)
		}
		if version == 0 {
			c.Source = "CPUID.0AH reports no architectural PMU (version 0)"
		}
		return c
	case "AuthenticAMD", "HygonGenuine":
		maxExt := cpuid(0x80000000, 0)[0]
		if maxExt >= 0x80000022 && cpuid(0x80000022, 0)[0]&1 != 0 {
			return Counters{GeneralPurpose: int(cpuid(0x80000022, 0)[1] & 0xf), Known: true, Source: "CPUID.80000022H (PerfMonV2)"}
		}
		if maxExt >= 0x80000001 && cpuid(0x80000001, 0)[2]&(1<<23) != 0 {
			return Counters{GeneralPurpose: 6, Known: true, Source: "CPUID.80000001H PerfCtrExtCore"}
		}
		return Counters{Source: "CPUID does not advertise PerfCtrExtCore (a hypervisor without a virtual PMU?)"}
	}
	return Counters{Source: "counter count is not exposed to user space on " + vendor}
}

// ReadCounters decodes this CPU's counters.
func ReadCounters(vendor string) Counters { return DecodeCounters(vendor, cpuidFunc) }
