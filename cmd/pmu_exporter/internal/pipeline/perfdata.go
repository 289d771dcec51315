package pipeline

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// openPerfData opens a perf.data file, or a pipe-mode stream on stdin for
// "-"; close releases it.
func OpenPerfData(path string, stdin io.Reader) (file *perfdata.File, close func(), err error) {
	var in io.Reader = stdin
	close = func() {}
	if path == "-" && stdin == nil {
		return nil, close, errors.New("- (standard input) is not a file here: name the perf.data file")
	}
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, close, err
		}
		in, close = f, func() { f.Close() }
	}
	file, err = perfdata.Open(in)
	if err != nil {
		close()
		return nil, func() {}, err
	}
	return file, close, nil
}

// PerfDataVisitor is what EachSample hands records to.
type PerfDataVisitor struct {
	Record func(rec []byte, h perfrecord.Header) // every record but samples (may be nil)
	Sample func(event int, s *perfrecord.Sample) error
}

// EachSample walks a perf.data file in perf's order, decoding its samples.
// A sample that cannot be decoded is counted in bad and the first one
// reported on warn, so that one bad record does not hide the others.
func EachSample(file *perfdata.File, name string, warn io.Writer, v PerfDataVisitor) (samples, bad uint64, err error) {
	var s perfrecord.Sample
	err = file.Ordered(func(rec []byte) error {
		h, _ := perfrecord.ParseHeader(rec)
		if h.Type != perfrecord.TypeSample {
			if v.Record != nil {
				v.Record(rec, h)
			}
			return nil
		}
		i, err := file.Events.ForSample(rec)
		if err == nil {
			err = perfrecord.DecodeSample(rec, file.Events.Attrs[i].Layout(), &s)
		}
		if err != nil {
			if bad == 0 {
				fmt.Fprintf(warn, "pmu_exporter: %s: sample %d: %v\n", name, samples+bad+1, err)
			}
			bad++
			return nil
		}
		samples++
		return v.Sample(i, &s)
	})
	return samples, bad, err
}
