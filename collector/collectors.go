package collector

import (
	"github.com/pmu-exporter/pmu_exporter/collector/registry"
)

// collectorList is every collector the exporter has, with its options bound
// to f and its factories, in the order they are set up: adding a collector
// adds its file (<name>.go with its <name>Entry) and a line here.
func collectorList(f *Options) *registry.Registry[*build] {
	r, err := registry.New(
		countingEntry(f),
		topdownEntry(f),
		cgroupEntry(f),
		samplingEntry(f),
		platformEntry(f),
		commEntry(f),
	)
	if err != nil {
		panic(err) // a programming error in the list above, caught by every test
	}
	return r
}
