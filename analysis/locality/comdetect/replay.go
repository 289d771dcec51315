package comdetect

import (
	"math/rand/v2"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/wpsim"
)

// Replay runs the detector over an access trace of one process as a
// counting sampler with watchpoints would see it: each thread's accesses
// sampled every Period accesses on average (uniform in [Period/2,
// 3·Period/2], seeded), the samples through Alg. 1 and, with Watchpoints,
// the trap path on simulated debug registers (wpsim).
type Replay struct {
	Det     *Detector
	W       *Watcher // nil without watchpoints
	Samples uint64
	regs    *wpsim.Registers
	period  uint64
	rng     *rand.Rand
	threads map[uint32]*replayThread
	time    uint64
}

type replayThread struct{ n, next uint64 }

// ReplayOptions shape the harness.
type ReplayOptions struct {
	Options
	Period, ArmDelay uint64
	Registers        int // debug registers per thread (0: 4)
	Watchpoints      bool
	Seed             uint64
}

const replayPID = 1

// NewReplay makes the harness.
func NewReplay(o ReplayOptions) *Replay {
	if o.Registers <= 0 {
		o.Registers = 4
	}
	r := &Replay{Det: New(o.Options), regs: wpsim.New(o.Registers, o.ArmDelay), period: max(o.Period, 1),
		rng: rand.New(rand.NewPCG(o.Seed, o.Seed+3)), threads: map[uint32]*replayThread{}}
	if o.Watchpoints {
		r.W = NewWatcher(r.Det, r, o.Registers, o.Seed+1)
	}
	return r
}

// Threads implements Backend.
func (r *Replay) Threads(uint32) []uint32 { return r.regs.Threads() }

// Arm implements Backend: watchpoints trap on loads and stores.
func (r *Replay) Arm(_, tid uint32, slot int, addr uint64, size uint8) {
	r.regs.Arm(tid, slot, addr, size, false)
}

// Disarm implements Backend.
func (r *Replay) Disarm(_, tid uint32, slot int) { r.regs.Disarm(tid, slot) }

// Access replays one access of thread tid (stores include atomic
// read-modify-writes).
func (r *Replay) Access(tid uint32, store bool, addr uint64, size uint8) {
	t := r.threads[tid]
	if t == nil {
		t = &replayThread{next: r.gap()}
		r.threads[tid] = t
		r.regs.Join(tid)
	}
	t.n++
	r.time++
	a := Access{PID: replayPID, TID: tid, CPU: tid, Time: r.time, Addr: addr, Size: size, Store: store, Period: r.period}
	if slot := r.regs.Access(tid, store, addr, size); slot >= 0 && r.W != nil {
		r.W.Trapped(&a, r.period)
	}
	if t.n >= t.next {
		t.next = t.n + r.gap()
		r.Samples++
		if r.W != nil {
			r.W.Sampled(&a, true)
		} else {
			r.Det.Add(&a)
		}
	}
}

func (r *Replay) gap() uint64 { return r.period/2 + r.rng.Uint64N(r.period+1) }

// Process is the replayed process's matrices.
func (r *Replay) Process() Matrix {
	if ms := r.Det.Report(replayPID, 16); len(ms) == 1 {
		return ms[0]
	}
	return Matrix{}
}

// FalseSharing emits the thesis' False-Sharing benchmark (Listing 5.2) as
// a trace: threads threads, one after another, iters atomic adds each; with
// probability f a thread adds to its own 8-byte slot of one line, else to
// one truly shared variable on another line.
func FalseSharing(threads, iters int, f float64, seed uint64, emit func(tid uint32, store bool, addr uint64, size uint8)) {
	const slots, shared = 0x10000, 0x10080
	rng := rand.New(rand.NewPCG(seed, seed+9))
	for range iters {
		for t := range threads {
			addr := uint64(shared)
			if rng.Float64() < f {
				addr = slots + 8*uint64(t)
			}
			emit(uint32(t+1), true, addr, 8)
		}
	}
}

// PointToPoint emits the Point-to-Point benchmark (Listing 5.4): four
// threads in pairs (1,2) and (3,4); with probability f a thread adds to its
// pair's variable (a line per pair), else to its own padded slot.
func PointToPoint(iters int, f float64, seed uint64, emit func(tid uint32, store bool, addr uint64, size uint8)) {
	rng := rand.New(rand.NewPCG(seed, seed+11))
	for range iters {
		for t := range 4 {
			addr := 0x20000 + 0x100*uint64(t) // own, padded
			if rng.Float64() < f {
				addr = 0x30000 + 0x100*uint64(t/2)
			}
			emit(uint32(t+1), true, addr, 8)
		}
	}
}
