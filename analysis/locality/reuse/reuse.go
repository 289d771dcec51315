// Package reuse is ReuseTracker (Sasongko et al.; thesis chapter 6, Algs.
// 2 and 3): a sampled access arms a watchpoint on its address in one of a
// few global slots (reservoir replacement keeps every sampled address an
// equal chance), read/write in the sampling thread and write-only in the
// others, and, with Options.Own, in one of its thread's own slots too
// (read/write in that thread alone: its next touch); the first trap gives
// one outcome per watch: a reuse, at the
// time distance between use and reuse on the thread's (or cache domain's)
// access clock, or an invalidation by another thread's store. It is pure:
// a Backend arms and disarms the registers (perf breakpoints live, a trace
// replay in tests and `pmu_exporter reuse`).
package reuse

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// Trap is what a watchpoint traps on.
type Trap uint8

const (
	TrapRW Trap = 1 // loads and stores
	TrapW  Trap = 2 // stores only
)

// Kind is what an access does to the bytes it touches, which names a
// reuse's pair: RAW is a read reusing what a write used, and so on. A
// read-modify-write (a locked add) is a write as a use (it leaves its line
// written) and a read as a reuse (it reads what the use left).
type Kind uint8

const (
	Unknown Kind = iota // a live trap whose instruction could not be decoded
	Read
	Write
)

// Use is a sampled access: its thread, bytes and kind, at Clock on the
// distance clock (its thread's own in Private mode, its domain's in
// Shared). At is its time on a clock every thread shares (0: Clock), by
// which TrappedOn tells the traps of an earlier arm where Clock is one
// thread's alone (live: its CPU time).
type Use struct {
	TID       uint32
	Addr      uint64
	Size      uint8
	Kind      Kind
	Clock, At uint64
}

// Hit is a trap of Slot in TID: the trapping access (Size 0: not known),
// at Clock on the trapping thread's distance clock and At on the shared
// one (0: Clock). Watched is the address the slot was armed on when it
// trapped (live traps name it; TrappedOn checks it).
type Hit struct {
	TID       uint32
	Slot      int
	Addr      uint64
	Size      uint8
	Kind      Kind
	Clock, At uint64
	Watched   uint64
}

// Backend sets the debug registers of the threads.
type Backend interface {
	Threads() []uint32
	Arm(tid uint32, slot int, addr uint64, size uint8, trap Trap)
	Disarm(tid uint32, slot int)
}

// Mode is what a reuse is.
type Mode uint8

const (
	// Private: reuse by the same thread (its private caches); another
	// thread's store in between is an invalidation.
	Private Mode = iota
	// Shared: reuse by another thread of the same cache domain (a shared
	// cache); a store from another domain is an invalidation.
	Shared
)

func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "private"
}

// Options shape the tracker.
type Options struct {
	Mode  Mode
	Slots int // debug registers per thread (4 on x86 and most Arm cores)
	// Domain is a thread's cache domain (Shared mode).
	Domain func(tid uint32) int
	Seed   uint64
	// Clock names the distance clock, for those who export the distances
	// (the trace harness: ClockAccesses; live: ClockThreadCPU or
	// ClockWall, or the events of --collector.comm.reuse-clock).
	Clock string
	// Replacement is how a sample takes an armed slot (Auto unless told;
	// Reservoir is the thesis').
	Replacement Replacement
	// Own is how many of each thread's Slots hold its own watches
	// (Private mode; the rest are global, armed in every thread): read
	// and write in the owner alone, so they see its next touch but not
	// another thread's store. A global slot is one register in every
	// thread, an own slot one in its owner only, so n threads watch
	// n·Own times as many accesses at once there (docs/sampling.md).
	Own int
}

// DefaultOwn is Options.Own for the CLI and live private mode: three of
// x86's four registers each thread's own, one global. It measured best
// at 1, 2 and 8 threads (docs/sampling.md); the invalidations rest on the
// one global slot.
const DefaultOwn = 3

// Replacement is the chance that a sample visiting armed slot i of n takes
// it, by the samples that visited it since it was armed (v ≥ 1). Any
// policy that does not look at the outcome suits the estimator, which ages
// every watch; they differ in how long the watches live (docs/sampling.md).
type Replacement uint8

const (
	// Auto is Keeper where every slot is global, and Reservoir in the own
	// slots and the global one beside them (Options.Own), that one with
	// its weights capped (MaxAcceptWeight): what measured best in each
	// (docs/sampling.md).
	Auto Replacement = iota
	// Keeper is Reservoir in every slot but the last (of two or more), which a visit takes
	// with chance 1/(KeeperPatience·v+1): that slot's watches live about
	// KeeperPatience times as long, so that the longest distances, and
	// the accesses never reused, have watches that outlast them.
	Keeper
	// Reservoir takes a slot with chance 1/(v+1): every sample since the
	// arm has had the same chance to hold it (ReuseTracker's).
	Reservoir
	// Patient takes any slot with chance 1/(2v+1): watches live longer,
	// fewer samples arm.
	Patient
	// Eager takes it with chance 1/√(v+1): watches are younger, more arm.
	Eager
)

// MaxAcceptWeight caps what a watch of the global slots beside own slots
// (Options.Own) weighs for the chance that its sample took the slot. The
// reservoir takes a slot held v visits with chance 1/(v+1), so the samples
// that replace an old watch weigh hundreds, and the one or two of them
// invalidated made a run's invalidated share anything from 0.22 to 1.49
// of the truth where the stores come right after the use. Capped at 16
// (weight truncation, as inverse-probability weighting does), 0.90 to
// 1.16, the means within 2%; 8 measured alike (docs/sampling.md).
const MaxAcceptWeight = 16

// KeeperPatience is how much longer Keeper's last slot keeps a watch. 4,
// 16 and 64 measured alike at the thesis' distances (docs/sampling.md).
const KeeperPatience = 16

// take is the chance that a visit takes slot i of n, visited v times
// since its arm.
func (r Replacement) take(i, n int, v float64) float64 {
	switch r {
	case Keeper:
		if n > 1 && i == n-1 {
			return 1 / (KeeperPatience*v + 1)
		}
	case Patient:
		return 1 / (2*v + 1)
	case Eager:
		return 1 / math.Sqrt(v+1)
	}
	return 1 / (v + 1)
}

// Clocker is a Backend that can tell a thread's distance clock at a time
// on the shared clock (Use.At; 0: now): the owner's clock when its watch is
// censored or invalidated, so that the watch is aged on the owner's clock
// as its reuse would have been. Where it cannot (false), or without it,
// the event's own clock is taken.
type Clocker interface {
	Clock(tid uint32, at uint64) (uint64, bool)
}

// Bins are the log2 bins of the time distance: bin k counts distances d
// with floor(log2 d) = k.
const Bins = 64

// Tracker is the global slots and the outcomes so far.
type Tracker struct {
	o     Options
	b     Backend
	clock Clocker // nil: the event's own clock
	rng   *rand.Rand
	slots []slot
	own   map[uint32][]slot // each thread's own slots (Options.Own)

	Samples, Dropped, Reuses, Invalidations uint64
	// Stale counts traps of a slot's earlier arm (TrappedOn).
	Stale uint64
	// Distance counts reuses by log2 bin of their time distance.
	Distance [Bins]uint64
	// Life is every watch by outcome and age, the censored ones (a later
	// sample took the slot) included: Estimate's input.
	Life LifeTable
	// Touch is the own slots' watches (Options.Own): their Reused column
	// is the owner's next touch, whether or not another thread stored in
	// between, which they do not see. Touches counts the touches observed
	// (Reuses includes them).
	Touch   LifeTable
	Touches uint64
	// HT weighs each outcome by the inverse of its chance to be observed
	// (Horvitz–Thompson: that its sample took a slot and the slot survived
	// replacement until it trapped), as ReuseTracker does. Kept to compare
	// with Estimate (docs/sampling.md): its weights grow as sampling gets
	// denser, and a few rare ones make a bin.
	HT HorvitzThompson
	// PairsSeen are the observed reuses by the use's kind, the reuse's
	// ([Write][Read]: RAW) and log2 bin; LocalitySeen by whether the reuse
	// began at the use's address (Temporal) or at another one overlapping
	// the watched bytes (Spatial: the watchpoint sees only those), or is
	// not known. Estimate's bins weigh them (Pairs, Localities).
	PairsSeen    [3][3][Bins]uint64
	LocalitySeen [3][Bins]uint64
}

// HorvitzThompson are the outcomes weighed by 1/(their chance to be seen).
type HorvitzThompson struct {
	Distance      [Bins]float64
	Invalidations float64
}

// Localities of a reuse (Tracker.LocalitySeen's index).
const (
	LocalityUnknown = iota
	Temporal
	Spatial
)

type slot struct {
	active  bool
	owner   uint32
	domain  int
	addr    uint64
	size    uint8
	kind    Kind
	p0      uint64  // the distance clock at the sample
	at      uint64  // the sample's time, on a clock all threads share (TrappedOn)
	samples float64 // samples that visited it since it was armed (1 when free)
	survive float64 // the chance its sample took a slot and it survived every visit so far
	bin     int     // the first fine bin of its age not yet in the life table's risk
}

// New tracks through b.
func New(b Backend, o Options) *Tracker {
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Domain == nil {
		o.Domain = func(uint32) int { return 0 }
	}
	if o.Mode != Private || o.Slots < 2 {
		o.Own = 0
	}
	o.Own = min(max(o.Own, 0), o.Slots-1)
	t := &Tracker{o: o, b: b, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9E3779B97F4A7C15)), slots: make([]slot, o.Slots-o.Own)}
	if o.Own > 0 {
		t.own = map[uint32][]slot{}
	}
	t.clock, _ = b.(Clocker)
	for i := range t.slots {
		t.slots[i].samples = 1
	}
	return t
}

// Sample handles a sampled access: Alg. 2's PMUSampleHandler. It reports
// whether a slot took the sample (its watchpoints were armed); a watch it
// replaces is censored at its age. In Private mode with Options.Own, the
// sample is offered to its thread's own slots as well, apart.
func (t *Tracker) Sample(u Use) bool {
	t.Samples++
	took := t.offer(t.slots, 0, u)
	if own := t.ownSlots(u.TID); own != nil && t.offer(own, len(t.slots), u) {
		took = true
	}
	if !took {
		t.Dropped++
	}
	return took
}

// offer is a sample's visit to slots (register base on): a free slot takes
// it, else each armed one in turn by the replacement's chance. A watch it
// replaces ends Censored in its life table.
func (t *Tracker) offer(slots []slot, base int, u Use) bool {
	// The chance this sample takes a slot: certain with one free, else
	// that some active slot accepts it. Its H–T weight divides by it.
	accept := 1.0
	free := false
	for i := range slots {
		free = free || !slots[i].active
	}
	if !free {
		none := 1.0
		for i := range slots {
			none *= 1 - t.policy(base).take(i, len(slots), slots[i].samples-1)
		}
		accept = 1 - none
	}
	pick := -1
	for pass := 0; pass < 2 && pick < 0; pass++ { // free slots first
		for i := range slots {
			s := &slots[i]
			if s.active != (pass == 1) {
				continue
			}
			take := 1.0 // a free slot takes the sample
			if s.active {
				take = t.policy(base).take(i, len(slots), s.samples-1)
			}
			accept := t.rng.Float64() <= take
			if !accept && s.active {
				t.visited(s, t.life(base), u)
				s.survive *= 1 - take
			}
			s.samples++
			if accept {
				pick = i
				break
			}
		}
	}
	if pick < 0 {
		return false
	}
	s := &slots[pick]
	at := u.At
	if at == 0 {
		at = u.Clock
	}
	if s.active {
		t.life(base).end(Censored, t.age(s, u.TID, u.Clock, at), s.bin, 1/s.survive)
	}
	if base == 0 && t.own != nil {
		accept = max(accept, 1.0/MaxAcceptWeight)
	}
	*s = slot{active: true, owner: u.TID, domain: t.o.Domain(u.TID), addr: u.Addr, size: u.Size, kind: u.Kind, p0: u.Clock, at: at, samples: 2, survive: accept}
	if base > 0 { // a thread's own slot: its owner alone traps
		t.b.Arm(u.TID, base+pick, u.Addr, u.Size, TrapRW)
		return true
	}
	for _, other := range t.b.Threads() {
		t.arm(other, pick)
	}
	return true
}

// life is the table where the watches of the slots from register base on
// end: the global slots' (Life), or the own slots' (Touch).
func (t *Tracker) life(base int) *LifeTable {
	if base == 0 {
		return &t.Life
	}
	return &t.Touch
}

// ownSlots are thread tid's own slots (nil without Options.Own).
func (t *Tracker) ownSlots(tid uint32) []slot {
	if t.own == nil {
		return nil
	}
	own := t.own[tid]
	if own == nil {
		own = make([]slot, t.o.Own)
		for i := range own {
			own[i].samples = 1
		}
		t.own[tid] = own
	}
	return own
}

// visited ages slot s at a visit by u's sample that left it armed: its
// weight so far holds for the bins up to its age, and grows after.
func (t *Tracker) visited(s *slot, life *LifeTable, u Use) {
	at := u.At
	if at == 0 {
		at = u.Clock
	}
	j := FineBin(max(t.age(s, u.TID, u.Clock, at), 1))
	life.atRisk(s.bin, j, 1/s.survive)
	s.bin = max(s.bin, j)
}

// age is slot s's age at an event of thread tid at clock on its clock and
// at on the shared one: on the owner's clock where the backend tells it.
func (t *Tracker) age(s *slot, tid uint32, clock, at uint64) uint64 {
	if t.clock != nil && tid != s.owner {
		if c, ok := t.clock.Clock(s.owner, at); ok {
			clock = c
		}
	}
	return clock - min(s.p0, clock)
}

// Finish ends the watches still armed: the run is over (a trace's end,
// or live the process's exit), and their sampled accesses were not reused
// within it. A watch whose owner's clock cannot be read then (live, on
// CLOCK_MONOTONIC: when the thread last ran is not known) is dropped
// without an outcome.
func (t *Tracker) Finish() {
	for i := range t.slots {
		t.end(&t.slots[i], &t.Life)
		for _, other := range t.b.Threads() {
			t.b.Disarm(other, i)
		}
	}
	for tid, own := range t.own {
		for i := range own {
			t.end(&own[i], &t.Touch)
			t.b.Disarm(tid, len(t.slots)+i)
		}
	}
}

// end ends slot s's watch at the run's end (Finish) and frees it.
func (t *Tracker) end(s *slot, life *LifeTable) {
	if s.active && t.clock != nil {
		if now, ok := t.clock.Clock(s.owner, 0); ok {
			life.end(Ended, now-min(s.p0, now), s.bin, 1/s.survive)
		}
	}
	*s = slot{samples: 1}
}

// arm sets slot i's watchpoint in thread tid: read/write in the owner
// (Private) or its domain's other threads (Shared), write-only elsewhere.
func (t *Tracker) arm(tid uint32, i int) {
	s := &t.slots[i]
	switch {
	case t.o.Mode == Private && tid == s.owner:
		t.b.Arm(tid, i, s.addr, s.size, TrapRW)
	case t.o.Mode == Shared && tid == s.owner:
		t.b.Disarm(tid, i) // the sampler's own reuse is private
	case t.o.Mode == Shared && t.o.Domain(tid) == s.domain:
		t.b.Arm(tid, i, s.addr, s.size, TrapRW)
	default:
		t.b.Arm(tid, i, s.addr, s.size, TrapW)
	}
}

// Join arms the watched addresses in a thread that started after they were
// armed (live: a new thread of a traced process).
func (t *Tracker) Join(tid uint32) {
	for i := range t.slots {
		if t.slots[i].active {
			t.arm(tid, i)
		}
	}
}

// TrappedOn is Trapped for a trap that names the address its watchpoint
// was armed on (live traps, read some time after they happened): a trap of
// an earlier arm of the slot is stale and ignored: one on another address,
// one that happened before the slot's sample (by At), or, in Shared mode,
// one in the sampling thread itself, which the slot never arms.
func (t *Tracker) TrappedOn(h Hit) {
	if s := t.slotOf(h); s != nil && s.active {
		at := h.At
		if at == 0 {
			at = h.Clock
		}
		if s.addr != h.Watched || at < s.at || (t.o.Mode == Shared && h.TID == s.owner) {
			t.Stale++
			return
		}
	}
	t.Trapped(h)
}

// Trapped handles a trap: Alg. 3's WPTrapHandler. The slot is freed and
// disarmed everywhere: one outcome per sample.
func (t *Tracker) Trapped(h Hit) {
	if h.Slot >= len(t.slots) {
		t.touched(h)
		return
	}
	s := t.slotOf(h)
	if s == nil {
		return
	}
	if s.active {
		reuse := h.TID == s.owner
		if t.o.Mode == Shared {
			reuse = h.TID != s.owner && t.o.Domain(h.TID) == s.domain
		}
		w := 1 / s.survive
		at := h.At
		if at == 0 {
			at = h.Clock
		}
		switch {
		case reuse && h.Clock > s.p0:
			d := h.Clock - s.p0
			t.Reuses++
			k := bits.Len64(d) - 1
			t.Distance[k]++
			t.HT.Distance[k] += w
			t.Life.end(Reused, d, s.bin, w)
			t.seen(s, h, k)
		case reuse: // no time passed on its clock: nothing to place it by
			t.Life.end(Censored, 0, s.bin, w)
		default:
			t.Invalidations++
			t.HT.Invalidations += w
			t.Life.end(Invalidated, t.age(s, h.TID, h.Clock, at), s.bin, w)
		}
	}
	*s = slot{samples: 1}
	for _, other := range t.b.Threads() {
		t.b.Disarm(other, h.Slot)
	}
}

// seen counts an observed reuse of s's access by h in bin k by its pair
// of kinds and its locality.
func (t *Tracker) seen(s *slot, h Hit, k int) {
	t.PairsSeen[s.kind][h.Kind][k]++
	switch {
	case h.Size == 0:
		t.LocalitySeen[LocalityUnknown][k]++
	case h.Addr == s.addr:
		t.LocalitySeen[Temporal][k]++
	default:
		t.LocalitySeen[Spatial][k]++
	}
}

// slotOf is the slot a hit names: a global one, or the trapping thread's
// own (nil: none).
func (t *Tracker) slotOf(h Hit) *slot {
	switch {
	case h.Slot < 0:
		return nil
	case h.Slot < len(t.slots):
		return &t.slots[h.Slot]
	case t.own != nil && h.Slot < len(t.slots)+t.o.Own && t.own[h.TID] != nil:
		return &t.own[h.TID][h.Slot-len(t.slots)]
	}
	return nil
}

// touched handles a trap of the trapping thread's own slot: its next
// touch of the bytes, the only access that slot traps on.
func (t *Tracker) touched(h Hit) {
	s := t.slotOf(h)
	if s == nil {
		return
	}
	if s.active && h.TID == s.owner {
		if h.Clock > s.p0 {
			d := h.Clock - s.p0
			k := bits.Len64(d) - 1
			t.Reuses++
			t.Touches++
			t.Distance[k]++
			t.Touch.end(Reused, d, s.bin, 1/s.survive)
			t.seen(s, h, k)
		} else {
			t.Touch.end(Censored, 0, s.bin, 1/s.survive)
		}
	}
	*s = slot{samples: 1}
	t.b.Disarm(h.TID, h.Slot)
}

// Estimate is the outcomes of all sampled accesses, from every watch
// (LifeTable.Estimate; with Options.Own, the own slots' touches join the
// global slots' reuses: Pooled).
func (t *Tracker) Estimate() Estimate {
	if t.own == nil && t.Touch.empty() { // a merged tracker holds its processes' own watches
		return t.Life.Estimate()
	}
	return Pooled(&t.Life, &t.Touch)
}

// Histogram is the estimated reuses of the sampled accesses by distance
// bin (rounded), up to the last bin used.
func (t *Tracker) Histogram() []uint64 {
	e := t.Estimate()
	bins, _ := e.Fractions()
	out := make([]uint64, len(bins))
	for k := range out {
		out[k] = uint64(math.Round(e.Bins[k].Share * float64(t.Samples)))
	}
	return out
}

// Pairs are the estimated shares of the sampled accesses reused by the
// kinds of use and reuse: each bin's observed reuses share its estimate.
func (t *Tracker) Pairs(e *Estimate) [3][3]float64 {
	var out [3][3]float64
	for u := range t.PairsSeen {
		for r := range t.PairsSeen[u] {
			out[u][r] = t.weigh(e, &t.PairsSeen[u][r])
		}
	}
	return out
}

// Localities are the estimated shares reused by locality (Temporal,
// Spatial, LocalityUnknown), as Pairs.
func (t *Tracker) Localities(e *Estimate) [3]float64 {
	var out [3]float64
	for l := range t.LocalitySeen {
		out[l] = t.weigh(e, &t.LocalitySeen[l])
	}
	return out
}

func (t *Tracker) weigh(e *Estimate, seen *[Bins]uint64) float64 {
	var s float64
	for k, n := range seen {
		if n > 0 {
			s += float64(n) / float64(t.Distance[k]) * e.Bins[k].Share
		}
	}
	return s
}

// Watches is how many watches ended with outcome o, the own slots' among
// them (their touches count as Reused).
func (t *Tracker) Watches(o Outcome) uint64 {
	return t.Life.Watches(o) + t.Touch.Watches(o)
}

// Raw is the observed reuses by distance bin, up to the last one used.
func (t *Tracker) Raw() []uint64 {
	n := 0
	for k, c := range t.Distance {
		if c > 0 {
			n = k + 1
		}
	}
	return append([]uint64{}, t.Distance[:n]...)
}

// Mode is the tracker's: private or shared reuse.
func (t *Tracker) Mode() Mode { return t.o.Mode }

// Distance clocks by name: the exported families' clock label, which says
// what was counted between a use and its reuse (the family's name says in
// what unit: seconds or events).
const (
	// ClockAccesses counts the thread's loads and stores (the trace
	// harness's, and live where a PMU counts them): the clock whose
	// distances the footprint turns into stack distances.
	ClockAccesses = "accesses"
	// ClockThreadCPU is the sampled thread's CPU time (its task-clock).
	ClockThreadCPU = "thread_cpu"
	// ClockWall is CLOCK_MONOTONIC, the address sampler's samples' time.
	ClockWall = "wall"
)

// TimeClock reports whether clock measures time, in units of 2⁻³⁰ s, rather
// than counting events.
func TimeClock(clock string) bool { return clock == ClockThreadCPU || clock == ClockWall }

// Clock names the tracker's distance clock (Options.Clock).
func (t *Tracker) Clock() string { return t.o.Clock }

// Slots is how many slots hold a watched address now.
func (t *Tracker) Slots() int {
	n := 0
	for _, s := range t.slots {
		if s.active {
			n++
		}
	}
	for _, own := range t.own {
		for _, s := range own {
			if s.active {
				n++
			}
		}
	}
	return n
}

// Merge adds o's outcomes to t (the totals of a process that is gone kept
// in its cgroup's, so that no counter goes down).
func (t *Tracker) Merge(o *Tracker) {
	t.Samples += o.Samples
	t.Dropped += o.Dropped
	t.Reuses += o.Reuses
	t.Invalidations += o.Invalidations
	t.Stale += o.Stale
	t.Life.Merge(&o.Life)
	t.Touch.Merge(&o.Touch)
	t.Touches += o.Touches
	t.HT.Invalidations += o.HT.Invalidations
	for k := range t.Distance {
		t.Distance[k] += o.Distance[k]
		t.HT.Distance[k] += o.HT.Distance[k]
		for u := range t.PairsSeen {
			for r := range t.PairsSeen[u] {
				t.PairsSeen[u][r][k] += o.PairsSeen[u][r][k]
			}
		}
		for l := range t.LocalitySeen {
			t.LocalitySeen[l][k] += o.LocalitySeen[l][k]
		}
	}
}

// PairName names a use and reuse pair: RAR, RAW, WAR, WAW ("" where
// either kind is unknown).
func PairName(use, reuse Kind) string {
	if use == Unknown || reuse == Unknown {
		return ""
	}
	name := [3]string{"", "R", "W"}
	return name[reuse] + "A" + name[use]
}

// policy is the replacement of the slots from register base on: Reservoir
// in the global ones beside own slots, else Options.Replacement (Auto:
// Keeper in global slots, Reservoir in own ones).
func (t *Tracker) policy(base int) Replacement {
	switch {
	case base == 0 && t.own != nil:
		return Reservoir
	case t.o.Replacement != Auto:
		return t.o.Replacement
	case base == 0:
		return Keeper
	}
	return Reservoir
}
