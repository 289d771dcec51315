// Package perffile builds perf.data files and kernel records byte for byte
// as perf and the kernel lay them out, for tests of the readers: the
// exact-ABI fixtures of what only real hardware would record (PEBS, IBS).
package perffile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

var le = binary.LittleEndian

// Record accumulates a record's body.
type Record struct{ b []byte }

// U64, U32 and U16 append a field.
func (r *Record) U64(v uint64) *Record { r.b = le.AppendUint64(r.b, v); return r }
func (r *Record) U32(v uint32) *Record { r.b = le.AppendUint32(r.b, v); return r }
func (r *Record) U16(v uint16) *Record { r.b = le.AppendUint16(r.b, v); return r }

// Str appends a NUL-terminated string padded to 8 bytes.
func (r *Record) Str(s string) *Record {
	n := (len(s) + 1 + 7) / 8 * 8
	r.b = append(r.b, append([]byte(s), make([]byte, n-len(s))...)...)
	return r
}

// Bytes is the record with its header.
func (r *Record) Bytes(typ uint32, misc uint16) []byte {
	h := make([]byte, 8, 8+len(r.b))
	le.PutUint32(h, typ)
	le.PutUint16(h[4:], misc)
	le.PutUint16(h[6:], uint16(8+len(r.b)))
	return append(h, r.b...)
}

// Attr is a 128-byte perf_event_attr (VER7, as perf 6.1 writes it).
func Attr(typ uint32, config, period, sampleType uint64, sampleIDAll bool, config1 uint64) []byte {
	b := make([]byte, 128)
	le.PutUint32(b, typ)
	le.PutUint32(b[4:], 128)
	le.PutUint64(b[8:], config)
	le.PutUint64(b[16:], period)
	le.PutUint64(b[24:], sampleType)
	if sampleIDAll {
		le.PutUint64(b[40:], 1<<18)
	}
	le.PutUint64(b[56:], config1)
	return b
}

// Event is an attr with its ids and the name EVENT_DESC gives it.
type Event struct {
	Attr []byte
	IDs  []uint64
	Name string
}

// Feature bits the files carry.
const (
	featHostname  = 3
	featArch      = 6
	featNRCPUs    = 7
	featCPUID     = 9
	featNUMA      = 14
	featCache     = 20
	featEventDesc = 12
	headerSize    = 104
	magic         = 0x32454c4946524550
)

// Host is what a file's feature sections say of the recording machine:
// perf c2c report needs the CPU count and the NUMA nodes (their CPU lists).
type Host struct {
	Name      string
	CPUs      uint32   // NRCPUS (0: no section)
	NUMANodes []string // NUMA_TOPOLOGY, e.g. {"0-3"} (nil: no section)
	Arch      string   // ARCH, uname -m ("": no section)
	CPUID     string   // CPUID, e.g. an Arm MIDR "0x00000000410fd0c0" ("": no section)
	Caches    []Cache  // CACHE (nil: no section)
}

// Cache is one cache of the CACHE section (perf's struct cpu_cache_level):
// Map is the CPUs that share it, as sysfs's shared_cpu_list.
type Cache struct {
	Level, LineSize, Sets, Ways uint32
	Type, Size, Map             string
}

func str(s string) []byte {
	n := (len(s) + 1 + 7) / 8 * 8
	b := le.AppendUint32(nil, uint32(n))
	return append(b, append([]byte(s), make([]byte, n-len(s))...)...)
}

// File lays out a perf.data file as perf record does: header, the id
// arrays and attrs, the data section, then the feature index and the
// HOSTNAME and EVENT_DESC sections.
func File(events []Event, hostname string, records ...[]byte) []byte {
	return FileOf(events, Host{Name: hostname}, records...)
}

// FileOf is File with more of the host described.
func FileOf(events []Event, host Host, records ...[]byte) []byte {
	var f bytes.Buffer
	f.Write(make([]byte, headerSize))
	idOff := make([]int, len(events))
	for i, e := range events {
		idOff[i] = f.Len()
		for _, id := range e.IDs {
			f.Write(le.AppendUint64(nil, id))
		}
	}
	attrsOff := f.Len()
	for i, e := range events {
		f.Write(e.Attr)
		f.Write(le.AppendUint64(le.AppendUint64(nil, uint64(idOff[i])), uint64(8*len(e.IDs))))
	}
	dataOff := f.Len()
	for _, r := range records {
		f.Write(r)
	}
	dataSize := f.Len() - dataOff
	desc := le.AppendUint32(le.AppendUint32(nil, uint32(len(events))), 128)
	for _, e := range events {
		desc = append(desc, e.Attr...)
		desc = le.AppendUint32(desc, uint32(len(e.IDs)))
		desc = append(desc, str(e.Name)...)
		for _, id := range e.IDs {
			desc = le.AppendUint64(desc, id)
		}
	}
	// Feature sections, in the order of their bits.
	type section struct {
		bit  int
		body []byte
	}
	sections := []section{{featHostname, str(host.Name)}, {featEventDesc, desc}}
	if host.CPUs > 0 {
		sections = append(sections, section{featNRCPUs, le.AppendUint32(le.AppendUint32(nil, host.CPUs), host.CPUs)})
	}
	if host.Arch != "" {
		sections = append(sections, section{featArch, str(host.Arch)})
	}
	if host.CPUID != "" {
		sections = append(sections, section{featCPUID, str(host.CPUID)})
	}
	if host.NUMANodes != nil {
		numa := le.AppendUint32(nil, uint32(len(host.NUMANodes)))
		for i, cpus := range host.NUMANodes {
			numa = le.AppendUint32(numa, uint32(i))
			numa = le.AppendUint64(numa, 64<<30) // mem_total, kB
			numa = le.AppendUint64(numa, 32<<30) // mem_free
			numa = append(numa, str(cpus)...)
		}
		sections = append(sections, section{featNUMA, numa})
	}
	if host.Caches != nil {
		// u32 version (1), u32 count, then each level's u32s and strings.
		c := le.AppendUint32(le.AppendUint32(nil, 1), uint32(len(host.Caches)))
		for _, l := range host.Caches {
			c = le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(c, l.Level), l.LineSize), l.Sets), l.Ways)
			c = append(append(append(c, str(l.Type)...), str(l.Size)...), str(l.Map)...)
		}
		sections = append(sections, section{featCache, c})
	}
	slices.SortFunc(sections, func(a, b section) int { return a.bit - b.bit })
	index := f.Len()
	f.Write(make([]byte, 16*len(sections)))
	offs := make([]int, len(sections))
	for i, sec := range sections {
		offs[i] = f.Len()
		f.Write(sec.body)
	}
	b := f.Bytes()
	for i, sec := range sections {
		le.PutUint64(b[index+16*i:], uint64(offs[i]))
		le.PutUint64(b[index+16*i+8:], uint64(len(sec.body)))
		b[72+sec.bit/8] |= 1 << (sec.bit % 8)
	}
	le.PutUint64(b, magic)
	le.PutUint64(b[8:], headerSize)
	le.PutUint64(b[16:], 128+16)
	le.PutUint64(b[24:], uint64(attrsOff))
	le.PutUint64(b[32:], uint64(len(events)*(128+16)))
	le.PutUint64(b[40:], uint64(dataOff))
	le.PutUint64(b[48:], uint64(dataSize))
	return b
}

// C2CSampleType is what perf c2c record asks of Intel's mem-loads and
// mem-stores.
const C2CSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_ID | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD |
	unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_WEIGHT_STRUCT

// C2C is the shape of a perf c2c record of the thesis' False-Sharing
// benchmark on a Skylake server: Threads threads atomically add (a PEBS
// load that hits a modified line in L3, then a store) to their own 8-byte
// slot of one heap line with probability F, else to a shared counter on
// the next line; every Period-th access is sampled.
type C2C struct {
	F                 float64
	Threads, Iters    int
	Period            uint64
	PID               uint32
	Heap              uint64 // the [heap] mapping's start
	Seed              uint64
	LoadSrc, StoreSrc uint64 // data_src of the loads and the stores
	// LoadSrcs and StoreSrcs, where given, are the loads' and the stores'
	// data_src in turn instead.
	LoadSrcs, StoreSrcs []uint64
	// CounterLines, where above 1, spreads the shared counter over that
	// many lines from SharedLn on, line j taken with weight 1/(j+1).
	CounterLines       int
	Loads, Stores      int    // filled in: the samples written
	SlotLine, SharedLn uint64 // filled in: the two lines' addresses
}

// The code addresses of the benchmark's two atomic adds (in
// /opt/fsbench/bench, mapped at 0x400000): the slot's add at LoadIP and
// StoreIP, the shared counter's 0x100 further.
const (
	LoadIP  = 0x401010
	StoreIP = 0x401014
)

// File writes the perf.data file: MMAP2s of the binary and the heap, then
// the samples.
func (c *C2C) File() []byte {
	ldlat := Attr(4, 0x1cd, c.Period, C2CSampleType, true, 30)
	st := Attr(4, 0x2cd, c.Period, C2CSampleType, true, 0)
	var recs [][]byte
	var exe, m Record
	// Every record but samples ends in the sample_id trailer the attrs'
	// sample_id_all promises (pid, tid, time, id, cpu, identifier for
	// C2CSampleType), or perf script refuses the file.
	trailer := func(r *Record, time uint64) {
		r.U32(c.PID).U32(c.PID).U64(time).U64(1).U32(0).U32(0).U64(1)
	}
	exe.U32(c.PID).U32(c.PID).U64(0x400000).U64(0x2000).U64(0).U64(0).U64(0).U64(0).U32(5).U32(2).Str("/opt/fsbench/bench")
	trailer(&exe, 1e9-2)
	recs = append(recs, exe.Bytes(unix.PERF_RECORD_MMAP2, unix.PERF_RECORD_MISC_USER))
	m.U32(c.PID).U32(c.PID).U64(c.Heap).U64(0x21000).U64(0).U64(0).U64(0).U64(0).U32(3).U32(2).Str("[heap]")
	trailer(&m, 1e9-1)
	recs = append(recs, m.Bytes(unix.PERF_RECORD_MMAP2, unix.PERF_RECORD_MISC_USER|unix.PERF_RECORD_MISC_MMAP_DATA))
	r := newRand(c.Seed)
	c.SlotLine, c.SharedLn = c.Heap+0x100, c.Heap+0x140
	time := uint64(1e9)
	for range c.Iters {
		tid := uint32(r.intn(c.Threads))
		addr := c.SharedLn
		if r.float() < c.F {
			addr = c.SlotLine + 8*uint64(tid)
		} else if c.CounterLines > 1 {
			addr += 64 * uint64(zipf(r, c.CounterLines))
		}
		for k, id := range []uint64{1, 2} {
			time += 100
			if r.intn(int(c.Period)) != 0 {
				continue
			}
			src := []uint64{c.LoadSrc, c.StoreSrc}[k]
			if k == 0 && len(c.LoadSrcs) > 0 {
				src = c.LoadSrcs[c.Loads%len(c.LoadSrcs)]
			}
			if k == 1 && len(c.StoreSrcs) > 0 {
				src = c.StoreSrcs[c.Stores%len(c.StoreSrcs)]
			}
			ip := []uint64{LoadIP, StoreIP}[k] // the atomic add's load and store
			if addr >= c.SharedLn {
				ip += 0x100 // the shared counter's add is other code
			}
			var s Record
			s.U64(id).U64(ip).U32(c.PID).U32(c.PID + 1 + tid).U64(time).U64(addr).U64(id).U32(tid).U32(0).U64(c.Period).
				U32(120).U16(0).U16(0).U64(src) // weight comes before data_src
			recs = append(recs, s.Bytes(unix.PERF_RECORD_SAMPLE, 0))
			if k == 0 {
				c.Loads++
			} else {
				c.Stores++
			}
		}
	}
	// Two last-level caches, each shared by half of the CPUs (a thread
	// runs on the CPU of its number): the communication between the
	// halves crosses them.
	half := max(c.Threads/2, 1)
	host := Host{Name: "skx", CPUs: uint32(c.Threads), NUMANodes: []string{fmt.Sprintf("0-%d", c.Threads-1)},
		Caches: []Cache{
			{Level: 3, LineSize: 64, Sets: 32768, Ways: 11, Type: "Unified", Size: "22528K", Map: fmt.Sprintf("0-%d", half-1)},
			{Level: 3, LineSize: 64, Sets: 32768, Ways: 11, Type: "Unified", Size: "22528K", Map: fmt.Sprintf("%d-%d", half, c.Threads-1)},
		}}
	return FileOf([]Event{{Attr: ldlat, IDs: []uint64{1}, Name: "cpu/mem-loads,ldlat=30/P"}, {Attr: st, IDs: []uint64{2}, Name: "cpu/mem-stores/P"}}, host, recs...)
}

// zipf draws j in [0, n) with weight 1/(j+1).
func zipf(r *rng, n int) int {
	sum := 0.0
	for j := range n {
		sum += 1 / float64(j+1)
	}
	x := r.float() * sum
	for j := range n - 1 {
		if x -= 1 / float64(j+1); x < 0 {
			return j
		}
	}
	return n - 1
}

// rng is a small PCG-style generator, so that generated files do not
// depend on math/rand's algorithms staying the same.
type rng struct{ s uint64 }

func newRand(seed uint64) *rng { return &rng{s: seed*2 + 1} }

func (r *rng) next() uint64 {
	r.s = r.s*6364136223846793005 + 1442695040888963407
	x := r.s
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }
