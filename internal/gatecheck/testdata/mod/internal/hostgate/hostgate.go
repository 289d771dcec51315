package hostgate

const (
	Watchpoints = "watchpoints"
	CPUHotplug  = "cpu_hotplug"
)
