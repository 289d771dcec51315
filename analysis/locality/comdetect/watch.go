package comdetect

import (
	"math/rand/v2"
	"slices"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
)

// Backend sets the debug registers of a process's threads (perf
// breakpoints live, wpsim over a trace): ComDetective's watchpoints trap
// on loads and stores.
type Backend interface {
	Threads(pid uint32) []uint32
	Arm(pid, tid uint32, slot int, addr uint64, size uint8)
	Disarm(pid, tid uint32, slot int)
}

// Watcher adds ComDetective's trap path (thesis §5.3.1, Alg. 1's
// TryArmWatchpoint; notes §2.2–2.3) to the detector: at each of its
// samples a thread arms its own debug registers on Registers randomly
// chosen 8-byte chunks of a line another thread of its process recently
// published (a sampled store), replacing what it watched; its first access
// to a watched chunk traps and is a communication with the publisher, true
// or false sharing by the overlap rule, weighing period × L/(D × M) (each
// trap stands for the accesses to the line's other chunks too); the trap
// disarms the thread until its next sample. Arming only the sampling
// thread keeps the arms at one per sample, however many threads there are.
type Watcher struct {
	det       *Detector
	b         Backend
	registers int
	rng       *rand.Rand
	watch     map[watchKey]watched // per thread: the line its registers watch
	recent    map[uint32][]publication
	// Traps counts detections by trap; samples' own are the detector's.
	Traps uint64
}

type watchKey struct{ pid, tid uint32 }

type watched struct {
	line uint64
	pub  publication
}

// recentPublications is how many of a process's latest publications a
// thread may arm on.
const recentPublications = 16

// NewWatcher arms through b, registers debug registers per thread.
func NewWatcher(det *Detector, b Backend, registers int, seed uint64) *Watcher {
	return &Watcher{det: det, b: b, registers: max(registers, 1), rng: rand.New(rand.NewPCG(seed, seed^0xA5A5)),
		watch: map[watchKey]watched{}, recent: map[uint32][]publication{}}
}

// Sampled runs Alg. 1 on a sampled access, keeps a store among its
// process's recent publications, and, with arm, arms the sampling thread on
// a line another thread published among them (chosen at random). A reader
// that gets samples in batches (out of process) arms at a thread's last
// sample of the batch only: the earlier arms would be replaced at once.
func (w *Watcher) Sampled(a *Access, arm bool) Detection {
	found := w.det.Add(a)
	line := a.Addr &^ (LineSize - 1)
	if a.Store {
		pubs := w.recent[a.PID]
		if len(pubs) >= recentPublications {
			pubs = pubs[1:]
		}
		w.recent[a.PID] = append(pubs, publication{line: line, addr: a.Addr, time: a.Time, pc: a.IP, tid: a.TID, cpu: a.CPU, width: a.Size, valid: true})
	}
	if !arm {
		return found
	}
	var others []int
	for i, p := range w.recent[a.PID] {
		if p.tid != a.TID {
			others = append(others, i)
		}
	}
	if len(others) == 0 {
		return found
	}
	pub := w.recent[a.PID][others[w.rng.IntN(len(others))]]
	for slot, c := range w.rng.Perm(LineSize / 8)[:min(w.registers, LineSize/8)] {
		w.b.Arm(a.PID, a.TID, slot, pub.line+8*uint64(c), 8)
	}
	w.watch[watchKey{a.PID, a.TID}] = watched{line: pub.line, pub: pub}
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
	// One trap per arm: the thread is disarmed until its next sample.
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

// ForgetThreads drops what the watcher keeps of pid's threads that exited:
// their publications (no thread arms on them any more) and the lines they
// watched. A thread still watching one of their publications keeps it: a
// trap on it is a read of what they wrote.
func (w *Watcher) ForgetThreads(pid uint32, tids []uint32) {
	w.recent[pid] = slices.DeleteFunc(w.recent[pid], func(p publication) bool { return slices.Contains(tids, p.tid) })
	if len(w.recent[pid]) == 0 {
		delete(w.recent, pid)
	}
	for _, tid := range tids {
		delete(w.watch, watchKey{pid, tid})
	}
}

// Forget drops what the watcher keeps of a process that is gone (or ran
// a new program): its recent publications and what its threads watch.
// Its registers went with its threads.
func (w *Watcher) Forget(pid uint32) {
	delete(w.recent, pid)
	for k := range w.watch {
		if k.pid == pid {
			delete(w.watch, k)
		}
	}
}
