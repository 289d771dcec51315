package eventspec_test

import (
	"fmt"

	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
)

// Parse checks perf's event syntax without the host's PMUs; Resolve then
// turns a spec into perf_event_attr fields from sysfs.
func ExampleParse() {
	s, err := eventspec.Parse("cpu/event=0xc2,umask=0x2,name=retire_slots/u")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.PMU, s.Modifiers)
	for _, t := range s.Terms {
		fmt.Println(t.Key, t.Value)
	}
	_, err = eventspec.Parse("cpu/event=0xc2")
	fmt.Println(err)
	// Output:
	// cpu u
	// event 0xc2
	// umask 0x2
	// name retire_slots
	// event "cpu/event=0xc2": missing closing '/' (the form is pmu/term=value,.../)
}
