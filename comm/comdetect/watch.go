package comdetect

import (
	"math/rand/v2"

	"github.com/pmu-exporter/pmu_exporter/comm/cacheline"
)

// Backend sets the debug registers of a process's threads (perf
// breakpoints live, wpsim over a trace): ComDetective's watchpoints trap
// on loads and stores.
type Backend interface {
	Threads(pid uint32) []uint32
	Arm(pid, tid uint32, slot int, addr uint64, size uint8)
	Disarm(pid, tid uint32, slot int)
}

// Watcher adds ComDetective's trap path (thesis §5.3.1, notes §2.2–2.3)
// to the detector: a sampled store publishes its line on the board and
// arms the other threads of its process on Registers randomly chosen
// 8-byte chunks of that line; the first access of one of them to a watched
// chunk traps and is a communication with the publisher, true or false
// sharing by the overlap rule, weighing period × L/(D × M) (each trap
// stands for the accesses to the line's other chunks too), after which the
// trapping thread is disarmed.
type Watcher struct {
	det       *Detector
	b         Backend
	registers int
	rng       *rand.Rand
	watch     map[watchKey]watched // per thread: the line its registers watch
	// Traps counts detections by trap; samples' own are the detector's.
	Traps uint64
}

type watchKey struct{ pid, tid uint32 }

type watched struct {
	line uint64
	pub  publication
}

// NewWatcher arms through b, registers debug registers per thread.
func NewWatcher(det *Detector, b Backend, registers int, seed uint64) *Watcher {
	return &Watcher{det: det, b: b, registers: max(registers, 1), rng: rand.New(rand.NewPCG(seed, seed^0xA5A5)), watch: map[watchKey]watched{}}
}

// Sampled runs Alg. 1 on a sampled access and, for a store, arms the
// other threads on its line.
func (w *Watcher) Sampled(a *Access) Detection {
	found := w.det.Add(a)
	if !a.Store {
		return found
	}
	line := a.Addr &^ (LineSize - 1)
	chunks := w.rng.Perm(LineSize / 8)[:min(w.registers, LineSize/8)]
	pub := publication{line: line, addr: a.Addr, time: a.Time, pc: a.IP, tid: a.TID, cpu: a.CPU, width: a.Size, valid: true}
	for _, tid := range w.b.Threads(a.PID) {
		if tid == a.TID {
			continue
		}
		for slot, c := range chunks {
			w.b.Arm(a.PID, tid, slot, line+8*uint64(c), 8)
		}
		w.watch[watchKey{a.PID, tid}] = watched{line: line, pub: pub}
	}
	return found
}

// Trapped records the access of a thread that trapped on its watched line
// (period: the sampling period the trap stands for), and disarms the
// thread.
func (w *Watcher) Trapped(a *Access, period uint64) Detection {
	k := watchKey{a.PID, a.TID}
	wt, ok := w.watch[k]
	if !ok || a.Addr&^(LineSize-1) != wt.line || wt.pub.tid == a.TID {
		return Detection{}
	}
	e := wt.pub
	trueSharing := a.Addr < e.addr+uint64(max(e.width, 1)) && e.addr < a.Addr+uint64(max(a.Size, 1))
	volume := period * LineSize / (uint64(w.registers) * 8)
	w.det.detect(w.det.process(a.PID), a, &e, trueSharing, volume)
	w.Traps++
	// Disarm the trapping thread only. The thesis disarms the line in
	// every thread; with one trap per publication a line whose threads
	// each own a chunk (false sharing: any of them may be watched) traps
	// far more often than a line of one shared variable (watched or not
	// for all), which biased the false-sharing fraction on the
	// False-Sharing benchmark (8 threads, f = 0.25: 0.32); per thread,
	// every access has the same chance D×M/L to be watched (0.25 → 0.25).
	for slot := range w.registers {
		w.b.Disarm(a.PID, a.TID, slot)
	}
	delete(w.watch, k)
	kind := cacheline.FalseSharing
	if trueSharing {
		kind = cacheline.TrueSharing
	}
	return Detection{Kind: kind, Peer: e.tid, PeerCPU: e.cpu}
}
