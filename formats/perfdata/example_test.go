package perfdata_test

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// Reading a perf.data file: Open takes in the header, attrs and features;
// Next hands out the data section's records; each sample is decoded with
// the layout of the event its id names.
func ExampleOpen() {
	file, err := os.Open("../../examples/replay/skx-c2c.data")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer file.Close()
	f, err := perfdata.Open(file)
	if err != nil {
		fmt.Println(err)
		return
	}
	var s perfrecord.Sample
	for n := 0; n < 2; {
		rec, err := f.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			fmt.Println(err)
			return
		}
		if h, _ := perfrecord.ParseHeader(rec); h.Type != perfrecord.TypeSample {
			continue
		}
		i, err := f.Events.ForSample(rec)
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := perfrecord.DecodeSample(rec, &f.Events.Layouts[i], &s); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s pid %d tid %d cpu %d addr %#x weight %d\n", f.Names[i], s.PID, s.TID, s.CPU, s.Addr, s.Weight)
		n++
	}
	// Output:
	// cpu/mem-loads,ldlat=30/P pid 4242 tid 4243 cpu 0 addr 0x555500000100 weight 120
	// cpu/mem-loads,ldlat=30/P pid 4242 tid 4244 cpu 1 addr 0x555500000108 weight 120
}
