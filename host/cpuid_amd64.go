package host

func cpuid(leaf, sub uint32) (a, b, c, d uint32)

var cpuidFunc CPUIDFunc = func(leaf, sub uint32) [4]uint32 {
	a, b, c, d := cpuid(leaf, sub)
	return [4]uint32{a, b, c, d}
}
