package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/collector/recorded"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/memop"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
)

// samplesFlags are the options of `pmu_exporter samples`.
type samplesFlags struct {
	input, format string
	symfs         string // where the recorded code is read (perf script --symfs)
}

// appendDumps adds the sample's variable fields to its line: the branch
// stack (brstack: each entry's addresses, its flags as perf script -F
// brstack prints them, and every flag the ABI carries), the registers
// (user_regs, intr_regs: the abi, the mask and the values in register
// number order), and the sizes of the user stack and AUX data dumped.
func appendDumps(b []byte, a perfrecord.Attr, s *perfrecord.Sample) []byte {
	has := func(bit uint64) bool { return s.Has&bit != 0 }
	key := func(k string) {
		b = append(b, `,"`...)
		b = append(b, k...)
		b = append(b, `":`...)
	}
	bool_ := func(k string, v bool) {
		b = append(b, `,"`...)
		b = append(b, k...)
		b = append(b, `":`...)
		b = strconv.AppendBool(b, v)
	}
	if has(unix.PERF_SAMPLE_BRANCH_STACK) {
		key("brstack")
		b = append(b, '[')
		for i := range s.BranchNr {
			e := s.Branch(i)
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"from":"0x`...)
			b = strconv.AppendUint(b, e.From, 16)
			b = append(b, `","to":"0x`...)
			b = strconv.AppendUint(b, e.To, 16)
			b = append(b, `","perf":"`...)
			b = e.AppendPerf(b)
			b = append(b, `","cycles":`...)
			b = strconv.AppendUint(b, uint64(e.Flags.Cycles()), 10)
			for _, f := range []struct {
				k string
				v uint8
			}{{"type", e.Flags.Type()}, {"new_type", e.Flags.NewType()}, {"spec", e.Flags.Spec()}, {"priv", e.Flags.Priv()}} {
				b = append(b, `,"`...)
				b = append(b, f.k...)
				b = append(b, `":`...)
				b = strconv.AppendUint(b, uint64(f.v), 10)
			}
			bool_("mispred", e.Flags.Mispredicted())
			bool_("predicted", e.Flags.Predicted())
			bool_("in_tx", e.Flags.InTx())
			bool_("abort", e.Flags.Abort())
			b = append(b, '}')
		}
		b = append(b, ']')
		if a.BranchSampleType&unix.PERF_SAMPLE_BRANCH_HW_INDEX != 0 {
			key("brstack_hw_index")
			b = strconv.AppendUint(b, s.BranchHWIndex, 10)
		}
	}
	regs := func(name string, abi, mask uint64, value func(int) uint64) {
		key(name)
		b = append(b, `{"abi":`...)
		b = strconv.AppendUint(b, abi, 10)
		b = append(b, `,"mask":"0x`...)
		b = strconv.AppendUint(b, mask, 16)
		b = append(b, `","values":[`...)
		for m, first := mask, true; m != 0; m &= m - 1 {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `"0x`...)
			b = strconv.AppendUint(b, value(bits.TrailingZeros64(m)), 16)
			b = append(b, '"')
		}
		b = append(b, "]}"...)
	}
	if has(unix.PERF_SAMPLE_REGS_USER) {
		regs("user_regs", s.RegsABI, s.RegsMask, func(r int) uint64 { return s.Regs[r] })
	}
	if has(unix.PERF_SAMPLE_REGS_INTR) {
		regs("intr_regs", s.IntrABI, s.IntrMask, func(r int) uint64 { v, _ := s.IntrReg(r); return v })
	}
	if has(unix.PERF_SAMPLE_STACK_USER) {
		key("stack_user_size")
		b = strconv.AppendUint(b, uint64(len(s.StackUser)), 10)
		key("stack_user_dyn_size")
		b = strconv.AppendUint(b, s.StackUserDyn, 10)
	}
	if has(unix.PERF_SAMPLE_AUX) {
		key("aux_size")
		b = strconv.AppendUint(b, uint64(len(s.Aux)), 10)
	}
	return b
}

// dataSrcJSON is the decoded data_src: the raw word, every field by the
// kernel's names, and the exporter's classification.
type dataSrcJSON struct {
	Raw string `json:"raw"`
	datasrc.Names
	Source string `json:"source"`
	Snoop  string `json:"snoop_class"`
	HITM   string `json:"hitm"`
	Peer   string `json:"peer"` // a load a peer cache served: none, local or remote, as perf c2c counts it
}

// peerName is the peer field of a load's contention.
func peerName(c datasrc.Contention) string {
	switch {
	case c&datasrc.ContRemotePeer != 0:
		return "remote"
	case c&datasrc.ContLocalPeer != 0:
		return "local"
	}
	return "none"
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// runSamples prints every sample of a perf.data file, in perf script's
// order, one JSON object per line.
func runSamples(sf samplesFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	rec, ok := openRecording("samples", sf.input, sf.symfs, stdin, stderr)
	if !ok {
		return 1
	}
	defer rec.Close()
	file, acc := rec.file, rec.acc
	w := bufio.NewWriterSize(stdout, 1<<16)
	lw := lineWriter{srcs: map[uint64][]byte{}}
	reads := readSplitter{last: map[uint64]uint64{}}
	var lost uint64
	samples, bad, err := recorded.EachSample(file, sf.input, stderr, recorded.Visitor{
		Record: func(raw []byte, h perfrecord.Header) {
			acc.Record(raw, h)
			if h.Type == perfrecord.TypeLost || h.Type == perfrecord.TypeLostSamples {
				if l, err := perfrecord.DecodeLost(raw); err == nil {
					lost += l.Lost
				}
			}
		},
		Sample: func(i int, s *perfrecord.Sample) error {
			if file.Events.Attrs[i].SampleType&unix.PERF_SAMPLE_READ != 0 {
				return reads.each(file.Events, s, func(j int, m *perfrecord.Sample) error {
					_, err := w.Write(lw.line(j, file.Names, file.Events.Attrs[j], m))
					return err
				})
			}
			line := lw.line(i, file.Names, file.Events.Attrs[i], s)
			if s.Has&unix.PERF_SAMPLE_REGS_USER != 0 {
				line = appendDecoded(line[:len(line)-2], acc, s)
			}
			_, err := w.Write(line)
			return err
		},
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	fmt.Fprintf(stderr, "%d samples, %d lost, %d malformed\n", samples, lost, bad)
	if err != nil {
		return rec.fail(err)
	}
	if bad > 0 {
		return 1
	}
	return 0
}

// readSplitter turns a sample that reads its group (perf record -e
// '{a,b}:S', PERF_SAMPLE_READ) into a sample of each value it read, as
// perf script delivers them (deliver_sample_value): the value's event,
// and the period since that id's last read; a value that did not change,
// or whose id names no event (read without PERF_FORMAT_ID), is not one.
type readSplitter struct {
	last   map[uint64]uint64 // id → its value at its last read
	member perfrecord.Sample
}

func (r *readSplitter) each(ev *perfrecord.Events, s *perfrecord.Sample, emit func(int, *perfrecord.Sample) error) error {
	for _, v := range s.Read {
		j, ok := ev.ByID(v.ID)
		if !ok {
			continue
		}
		period := v.Value - r.last[v.ID]
		r.last[v.ID] = v.Value
		if period == 0 {
			continue
		}
		r.member = *s
		r.member.ID, r.member.Period = v.ID, period
		r.member.Has |= unix.PERF_SAMPLE_PERIOD
		if err := emit(j, &r.member); err != nil {
			return err
		}
	}
	return nil
}

// appendDecoded adds, to a sample line without its closing "}\n", the
// access the address sampler resolves the sample to: "access" (load,
// store or rmw), "access_addr", "access_width" and "access_ip" (the
// instruction: the sampled one or the one before it), or "unresolved" and
// why.
func appendDecoded(b []byte, acc *recorded.Accesses, s *perfrecord.Sample) []byte {
	a, r := acc.Resolver.Sample(s, 0)
	if r != memop.Resolved {
		b = append(b, `,"unresolved":"`...)
		b = append(b, r.String()...)
		return append(b, "\"}\n"...)
	}
	kind := memop.Load
	if a.Store {
		kind = memop.Store
	}
	b = append(b, `,"access":"`...)
	b = append(b, kind.String()...)
	b = append(b, `","access_addr":"0x`...)
	b = strconv.AppendUint(b, a.Addr, 16)
	b = append(b, `","access_width":`...)
	b = strconv.AppendUint(b, uint64(a.Size), 10)
	b = append(b, `,"access_ip":"0x`...)
	b = strconv.AppendUint(b, a.IP, 16)
	return append(b, "\"}\n"...)
}

// lineWriter writes sample lines by appending to one buffer: the
// encoding/json path cost more than perf script's whole run
// (BenchmarkSamplesVsPerfScript). Event names and data_src objects are
// encoded once each.
type lineWriter struct {
	buf    []byte
	names  [][]byte
	srcs   map[uint64][]byte
	fields []perfrecord.PrintedField // a sample's, reused
}

// line is the JSON line of sample s of event i; an event with a fixed
// period that is not sampled has that period, as perf script prints it.
func (w *lineWriter) line(i int, names []string, a perfrecord.Attr, s *perfrecord.Sample) []byte {
	has := func(bit uint64) bool { return s.Has&bit != 0 }
	for len(w.names) < len(names) { // pipe-mode files name their events as they go
		n, _ := json.Marshal(names[len(w.names)])
		w.names = append(w.names, n)
	}
	b := append(w.buf[:0], `{"event":`...)
	b = append(b, w.names[i]...)
	num := func(key string, v uint64) {
		b = append(b, `,"`...)
		b = append(b, key...)
		b = append(b, `":`...)
		b = strconv.AppendUint(b, v, 10)
	}
	hexField := func(key string, v uint64) {
		b = append(b, `,"`...)
		b = append(b, key...)
		b = append(b, `":"0x`...)
		b = strconv.AppendUint(b, v, 16)
		b = append(b, '"')
	}
	// The sample's own fields, as perfrecord's table prints them; an
	// event with a fixed period that does not sample it has that period.
	w.fields = s.Printed(w.fields[:0])
	for _, f := range w.fields {
		switch {
		case f.Name == "data_src":
			src, ok := w.srcs[f.Value]
			if !ok {
				d := datasrc.Decode(f.Value)
				src, _ = json.Marshal(dataSrcJSON{Raw: hex(f.Value), Names: d.Names(), Source: d.Source().String(), Snoop: d.SnoopName(), HITM: d.HITM().String(), Peer: peerName(d.Contention())})
				w.srcs[f.Value] = src
			}
			b = append(b, `,"data_src":`...)
			b = append(b, src...)
		case f.Hex:
			hexField(f.Name, f.Value)
		default:
			num(f.Name, f.Value)
		}
	}
	if !has(unix.PERF_SAMPLE_PERIOD) && !a.Freq {
		num("period", a.Period)
	}
	b = appendDumps(b, a, s)
	b = append(b, "}\n"...)
	w.buf = b
	return b
}
