// Package recorded reads perf.data recordings for the replay factories and
// the offline subcommands (samples, c2c, comm, reuse): a file or a pipe
// opened and closed with what reading it holds, its samples visited in
// perf's order with the decode errors and AUX losses said, their accesses
// resolved from the recording's own mappings and code, and which sampler
// made them.
package recorded

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
	"github.com/pmu-exporter/pmu_exporter/formats/codemap"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfdata"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/formats/spe"
	"github.com/pmu-exporter/pmu_exporter/kernel/safeopen"
)

// Open opens a perf.data file, or a pipe-mode stream on stdin for
// "-"; close releases both the file and what reading it holds.
func Open(path string, stdin io.Reader) (file *perfdata.File, close func(), err error) {
	var in io.Reader = stdin
	close = func() {}
	if path == "-" && stdin == nil {
		return nil, close, errors.New("- (standard input) is not a file here: name the perf.data file")
	}
	if path != "-" {
		// perf.data is read as it goes (no ceiling): only a regular file.
		f, err := safeopen.Regular(path)
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
	closeIn := close
	return file, func() { file.Close(); closeIn() }, nil
}

// Visitor is what EachSample hands records to.
type Visitor struct {
	Record func(rec []byte, h perfrecord.Header) // every record but samples (may be nil)
	Sample func(event int, s *perfrecord.Sample) error
	// Other, once the file is read, is how many Arm SPE records made no
	// sample: operations that are neither loads nor stores (may be nil).
	Other func(n uint64)
}

// EachSample walks a perf.data file in perf's order, decoding its samples,
// and those perf makes of Arm SPE data (its "memory" event). A sample
// that cannot be decoded is counted in bad and the first one reported on
// warn, so that one bad record does not hide the others; so is a chunk of
// SPE data with a packet that does not decode.
func EachSample(file *perfdata.File, name string, warn io.Writer, v Visitor) (samples, bad uint64, err error) {
	var s perfrecord.Sample
	var armSPE *spe.PerfData
	var lossAUX auxLoss
	aux := func(rec []byte, emit func(uint64, []byte)) error {
		if armSPE == nil {
			return nil
		}
		return armSPE.Decode(rec, emit)
	}
	err = file.OrderedAux(aux, func(rec []byte) error {
		h, _ := perfrecord.ParseHeader(rec)
		if h.Type != perfrecord.TypeSample {
			switch {
			case h.Type == perfdata.TypeAuxtraceInfo && armSPE == nil:
				// It comes before the AUX data, and out of time
				// order: before the COMM records of the threads.
				var err error
				if armSPE, err = spe.NewPerfData(file); err != nil {
					return err
				}
			case armSPE != nil:
				armSPE.Record(rec, h)
			}
			lossAUX.record(rec, h)
			if v.Record != nil {
				v.Record(rec, h)
			}
			return nil
		}
		i, err := file.Events.ForSample(rec)
		if err == nil {
			err = perfrecord.DecodeSample(rec, &file.Events.Layouts[i], &s)
		}
		if err != nil {
			if bad == 0 {
				fmt.Fprintf(warn, "pmu_exporter: %s: sample %d: %v\n", name, samples+bad+1, err)
			}
			bad++
			return nil
		}
		if armSPE != nil && i == armSPE.Event {
			armSPE.Fill(&s)
		}
		samples++
		return v.Sample(i, &s)
	})
	lossAUX.warn(warn, name)
	if armSPE != nil && v.Other != nil {
		v.Other(armSPE.Other)
	}
	if armSPE != nil && armSPE.Bad > 0 {
		fmt.Fprintf(warn, "pmu_exporter: %s: %d chunks of Arm SPE data with a packet that does not decode, read up to it: %v\n", name, armSPE.Bad, armSPE.First)
		bad += armSPE.Bad
	}
	if armSPE != nil && armSPE.Cut > 0 {
		fmt.Fprintf(warn, "pmu_exporter: %s: %d chunks of Arm SPE data end inside a record (data lost while recording): those records are dropped\n", name, armSPE.Cut)
	}
	if n := file.OpenedCPUs(); err == nil && n > 0 && n < file.CPUsOnline {
		fmt.Fprintf(warn, "pmu_exporter: %s: perf opened its events on %d of the %d CPUs online when it ended: what ran on the others is not in the recording (a CPU that came online after perf started, or perf record -C)\n",
			name, n, file.CPUsOnline)
	}
	return samples, bad, err
}

// auxLoss counts the kernel's AUX records and those that say the AUX data
// was cut short, had gaps or collided, as perf does to warn of them.
type auxLoss struct{ records, truncated, partial, collision uint64 }

func (a *auxLoss) record(rec []byte, h perfrecord.Header) {
	if h.Type != perfrecord.TypeAux {
		return
	}
	r, err := perfrecord.DecodeAux(rec)
	if err != nil {
		return
	}
	a.records++
	if r.Flags&perfrecord.AuxTruncated != 0 {
		a.truncated++
	}
	if r.Flags&perfrecord.AuxPartial != 0 {
		a.partial++
	}
	if r.Flags&perfrecord.AuxCollision != 0 {
		a.collision++
	}
}

// warn says what perf script says of them.
func (a *auxLoss) warn(w io.Writer, name string) {
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{a.truncated, "AUX data lost %d times out of %d (the AUX area was full: the records that did not fit are missing)"},
		{a.partial, "AUX data had gaps in it %d times out of %d"},
		{a.collision, "AUX data detected collision %d times out of %d"},
	} {
		if c.n > 0 {
			fmt.Fprintf(w, "pmu_exporter: %s: "+c.what+"\n", name, c.n, a.records)
		}
	}
}

// Accesses turns a recording's samples into the sampled-access stream:
// precise memory samples (perf mem, perf c2c) as they are, with the
// access width decoded from the instruction at their IP, and timer
// samples with user registers (perf record -e cpu-clock:u --user-regs=…)
// by decoding the instruction at their IP, read from the files the
// recording's MMAP2 records name.
type Accesses struct {
	Maps     *addrmap.Maps
	Code     *codemap.Map
	Resolver *memop.Resolver
	Names    map[[2]uint32]string // (pid, tid) → comm
	// Undecoded says why the recording's instructions are not decoded
	// (an architecture the decoder does not know), nil where they are:
	// its samples are read all the same, without the accesses their
	// instructions make.
	Undecoded error
}

// NewAccesses reads code from the files as this machine has them, under
// symfs where it is not "" (as perf script --symfs: the recording host's
// /usr/bin/x is symfs/usr/bin/x here); arch is the recording machine's
// (perf.data's arch header), else this one's.
func NewAccesses(arch, symfs string) (*Accesses, error) {
	maps := addrmap.New()
	code := codemap.New(maps, func(_ uint32, name string) (codemap.File, string, error) {
		// The recording names the files: resolved inside --replay.symfs
		// (a name with ../ or a link stays in it), a regular file only.
		if symfs != "" {
			f, err := safeopen.InRoot(symfs, "/"+strings.TrimPrefix(name, "/"))
			return f, name, err
		}
		f, err := safeopen.Regular(name)
		return f, name, err
	}, nil)
	res, err := memop.NewResolver(code, arch)
	if err != nil {
		res = memop.NewUndecodingResolver(code)
	}
	return &Accesses{Maps: maps, Code: code, Resolver: res, Names: map[[2]uint32]string{}, Undecoded: err}, nil
}

// Record follows mappings and exec's.
func (a *Accesses) Record(rec []byte, h perfrecord.Header) {
	switch h.Type {
	case perfrecord.TypeMmap, perfrecord.TypeMmap2:
		if m, err := perfrecord.DecodeMmap(rec); err == nil {
			a.Maps.Add(m.PID, addrmap.Mapping{Start: m.Addr, End: m.Addr + m.Len, PgOff: m.PgOff, Name: m.Filename})
			a.Resolver.Unmap(m.PID, m.Addr, m.Addr+m.Len)
		}
	case perfrecord.TypeComm:
		if c, err := perfrecord.DecodeComm(rec); err == nil {
			if c.Exec {
				a.Resolver.Forget(c.PID)
				a.Code.Forget(c.PID)
			}
			a.Names[[2]uint32{c.PID, c.TID}] = c.Name
		}
	}
}

// Access is a sample's access, if it has one.
func (a *Accesses) Access(attr perfrecord.Attr, s *perfrecord.Sample) (memaccess.Access, bool) {
	// A sample with neither registers nor a data address (perf record
	// without --user-regs) goes the decoder's way too, to be counted as
	// no_registers: the reason a user sees when nothing resolves.
	if attr.SampleType&unix.PERF_SAMPLE_REGS_USER != 0 || attr.SampleType&unix.PERF_SAMPLE_ADDR == 0 {
		acc, r := a.Resolver.Sample(s, attr.SamplePeriod())
		return acc, r == memop.Resolved
	}
	// A precise sample's width comes from the instruction at its IP, or
	// before it for PEBS at precise_ip 1 (the IP after the access).
	acc, ok, _ := a.Resolver.Precise(s, attr.SamplePeriod(), attr.PreciseIP == 1)
	return acc, ok
}

// Close closes the files opened for code.
func (a *Accesses) Close() { a.Code.Close() }

// GoArch is Go's name of a machine as uname -m (and perf.data's arch
// header) names it; "" is this machine.
func GoArch(machine string) string {
	switch machine {
	case "x86_64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "":
		return runtime.GOARCH
	}
	return machine
}

// Sampler names the sampler of a recording's events: decode for
// timer samples with user registers, else ibs, spe or pebs by the events.
func Sampler(attrs []perfrecord.Attr, names []string) string {
	for _, a := range attrs {
		if a.SampleType&unix.PERF_SAMPLE_REGS_USER != 0 {
			return "decode"
		}
	}
	for _, n := range names {
		switch {
		case strings.Contains(n, "ibs"):
			return "ibs"
		case strings.Contains(n, "arm_spe"):
			return "spe"
		}
	}
	return "pebs"
}
