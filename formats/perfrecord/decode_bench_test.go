package perfrecord

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkDecodeSample decodes one record of each common layout: a PEBS
// load sample (fixed: identifier, ip, tid, time, addr, cpu, period,
// weight, data_src, phys_addr), and a timer sample with the user registers
// of the address sampler (variable).
func BenchmarkDecodeSample(b *testing.B) {
	pebs := Layout{SampleType: unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
		unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_WEIGHT |
		unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_PHYS_ADDR}
	in := Sample{ID: 7, IP: 0x401000, PID: 10, TID: 11, Time: 123456789, Addr: 0x7fff0000, CPU: 1, Period: 10007, Weight: 42, DataSrc: 0x1234, PhysAddr: 0x1000}
	rec, err := AppendSample(nil, pebs, &in)
	if err != nil {
		b.Fatal(err)
	}
	timer := Layout{SampleType: unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
		unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_REGS_USER, RegsUser: 0xff0fff}
	trec := timerRecord(timer)
	for _, c := range []struct {
		name string
		rec  []byte
		l    Layout
	}{{"pebs-fixed", rec, pebs}, {"timer-regs", trec, timer}} {
		b.Run(c.name, func(b *testing.B) {
			var s Sample
			for b.Loop() {
				if err := DecodeSample(c.rec, &c.l, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// timerRecord is a sample of l with every register of its mask dumped.
func timerRecord(l Layout) []byte {
	body := le.AppendUint64(nil, 7)                       // identifier
	body = le.AppendUint64(body, 0x401000)                // ip
	body = le.AppendUint32(le.AppendUint32(body, 10), 11) // pid, tid
	body = le.AppendUint64(body, 123456789)               // time
	body = le.AppendUint32(le.AppendUint32(body, 1), 0)   // cpu, reserved
	body = le.AppendUint64(body, 1000000)                 // period
	body = le.AppendUint64(body, 2)                       // abi: 64-bit
	for m := l.RegsUser; m != 0; m &= m - 1 {
		body = le.AppendUint64(body, m)
	}
	rec := le.AppendUint32(nil, TypeSample)
	rec = le.AppendUint16(rec, 2)
	rec = le.AppendUint16(rec, uint16(HeaderSize+len(body)))
	return append(rec, body...)
}
