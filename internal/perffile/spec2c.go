package perffile

// SPEC2C is the thesis' False-Sharing benchmark as `perf record -e
// arm_spe_0/ts_enable=1,pa_enable=1/` would take it on a Neoverse N1 with
// two clusters of two cores: Threads threads, thread i (TID PID+1+i) on CPU
// i%4, each iteration loading, then storing (ldr, add, str: not an atomic)
// its own 8-byte slot of one heap line with probability F, else a shared
// counter on the next line; SPE samples each operation with probability
// 1/Period. A load is served by its own L1 when its thread wrote the line
// last, by a peer core's cache when another core of its cluster did, by the
// peer cluster otherwise, and by DRAM the first time.
type SPEC2C struct {
	F                    float64
	Threads, Iters       int
	Period               int
	PID                  uint32
	Seed                 uint64
	Loads, Stores        int    // filled in: the samples written
	SlotLine, CounterLn  uint64 // filled in: the two lines' addresses
	PeerCore, PeerClustr int    // filled in: loads served by a peer core, the peer cluster
}

// The benchmark's code (in /opt/fsbench/bench, mapped at 0x400000) and
// heap, and the N1's data sources (the common encoding) it meets.
const (
	speHeap          = 0x5555_0000_0000
	speSlotLoad      = 0x401010 // +4: the store; the counter's code is 0x100 further
	speSrcL1         = 0x0
	speSrcPeerCore   = 0x9
	speSrcPeerClustr = 0xc
	speSrcDRAM       = 0xe
)

// File writes the perf.data file: the threads' COMMs, the binary's and the
// heap's MMAP2s, then each CPU's AUX data a round at a time.
func (c *SPEC2C) File() []byte {
	const cpus = 4
	r := newRand(c.Seed)
	c.SlotLine, c.CounterLn = speHeap+0x100, speHeap+0x140
	threads := []uint32{c.PID}
	for i := range c.Threads {
		threads = append(threads, c.PID+1+uint32(i))
	}
	s := SPE{PMUType: 9, MIDR: 0x410fd0c1, PID: c.PID, Comm: "fsbench", Threads: threads, CPUs: cpus,
		Mult: 1, Zero: 1e9, RoundEvery: cpus,
		Mmaps: []SPEMmap{{Start: 0x400000, Len: 0x2000, Filename: "/opt/fsbench/bench"}, {Start: speHeap, Len: 0x21000, Filename: "[heap]", Data: true}}}
	lastWriter := map[uint64]int{} // line → thread
	latency := map[uint8]uint16{speSrcL1: 4, speSrcPeerCore: 40, speSrcPeerClustr: 90, speSrcDRAM: 200}
	var ops [cpus][]SPEOp
	ts := uint64(1000)
	for i := range c.Iters {
		th := r.intn(c.Threads)
		cpu := th % cpus
		addr, pc := c.CounterLn, uint64(speSlotLoad+0x100)
		if r.float() < c.F {
			addr, pc = c.SlotLine+8*uint64(th), speSlotLoad
		}
		line := addr &^ 63
		src := uint8(speSrcDRAM)
		if w, ok := lastWriter[line]; ok {
			switch {
			case w == th:
				src = speSrcL1
			case w%cpus/2 == cpu/2:
				src = speSrcPeerCore
			default:
				src = speSrcPeerClustr
			}
		}
		lastWriter[line] = th
		ts += 4
		for k, store := range []bool{false, true} {
			if r.intn(c.Period) != 0 {
				continue
			}
			o := SPEOp{PC: pc + 4*uint64(k), Virtual: addr, Physical: 0x8_0000_0000 + addr&0xfffffff, Store: store,
				Total: latency[src] + uint16(r.intn(8)), Issue: 2, Source: src, Context: threads[1+th], Timestamp: ts + uint64(k*2+cpu%2)}
			if store {
				o.Total, o.Source = 2+uint16(r.intn(4)), speSrcL1
				c.Stores++
			} else {
				c.Loads++
				switch src {
				case speSrcPeerCore:
					c.PeerCore++
				case speSrcPeerClustr:
					c.PeerClustr++
				}
			}
			ops[cpu] = append(ops[cpu], o)
		}
		if (i+1)%2000 == 0 || i == c.Iters-1 { // a round: each CPU's buffer drained
			for cpu := range ops {
				if len(ops[cpu]) > 0 {
					s.Traces = append(s.Traces, SPETrace{CPU: uint32(cpu), Data: SPEPackets(ops[cpu]...)})
				}
				ops[cpu] = nil
			}
		}
	}
	return s.File()
}
