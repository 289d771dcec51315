// Package comdetect builds ComDetective's communication matrices (Sasongko
// et al.; thesis chapter 5, Alg. 1) from sampled memory accesses: stores
// publish their address on a per-process bulletin board keyed by cache
// line; a later sample of another thread on a line whose publication is
// still fresh is a communication between the two threads (and their CPUs),
// true sharing when the two accesses' byte ranges overlap and false sharing
// when they do not. Each detection adds the sampling period (the accesses
// the sample stands for); raw detection counts are kept beside every
// estimate so its error can be judged. It is pure and allocates nothing per
// access once a process's threads and pairs are known.
package comdetect

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/cacheline"
	"github.com/pmu-exporter/pmu_exporter/formats/memaccess"
)

// LineSize is the cache line the board is keyed by.
const LineSize = 64

// Options shape the detector.
type Options struct {
	// Board is the bulletin board's entries per process (the thesis' 127).
	Board int
	// Window is how many of a reader's own samples a publication stays
	// fresh for it. The thesis expires after 2, tuned for PEBS periods with
	// watchpoints doing most detections; sampling alone needs a longer one
	// (see DefaultWindow).
	Window int
	// MaxLines bounds the lines per process kept for the report.
	MaxLines int
}

// Defaults are the thesis' board and the window measured for timer
// sampling on the ground-truth benchmarks.
const (
	DefaultBoard = 127
	// DefaultWindow: with samples alone a publication must outlive enough
	// of the reader's samples that a line the reader touches with
	// probability f is matched in proportion to f (the false-sharing
	// fraction then tracks f within ±0.05 on the False-Sharing benchmark;
	// the thesis' 2 under-counts the rarely sampled line: docs/sampling.md).
	DefaultWindow = 32
	// PreciseWindow is the thesis' expiry, for counting samples (PEBS,
	// IBS, SPE): on the synthetic perf c2c recording of the False-Sharing
	// benchmark (f = 0.7) it gives 0.699, a window of 32 gives 0.653.
	PreciseWindow   = 2
	DefaultMaxLines = 4096
)

// Window is the window to use: asked, where the user set one (> 0), else
// the default for the sampler that feeds the detector, DefaultWindow for
// the decoded address sampler (precise false) and PreciseWindow for counting
// samples (PEBS, IBS, SPE). The command line, the pipeline and the help
// text all take it from here.
func Window(asked int, precise bool) int {
	switch {
	case asked > 0:
		return asked
	case precise:
		return PreciseWindow
	}
	return DefaultWindow
}

// WindowHelp says what a window of 0 means, for the flags' help.
func WindowHelp() string {
	return fmt.Sprintf("0: per sampler, %d for the address sampler, the thesis' %d for precise (counting) samples", DefaultWindow, PreciseWindow)
}

// Access is one sampled access: the stream every sampler feeds (the
// decoded address sampler, PEBS, IBS, SPE). A store or read-modify-write
// publishes; Size is its width (0: one byte).
type Access = memaccess.Access

// Detector holds every process's board and matrices.
type Detector struct {
	o     Options
	procs map[uint32]*process
	gone  Cell // totals of forgotten processes
}

// New makes a detector; zero options take the defaults.
func New(o Options) *Detector {
	if o.Board <= 0 {
		o.Board = DefaultBoard
	}
	o.Window = Window(o.Window, false)
	if o.MaxLines <= 0 {
		o.MaxLines = DefaultMaxLines
	}
	return &Detector{o: o, procs: map[uint32]*process{}}
}

// Window is the expiry in force.
func (d *Detector) Window() int { return d.o.Window }

type process struct {
	comm    string
	board   []publication
	threads map[uint32]*thread
	pairs   map[pair]*Cell // thread pairs
	cpus    map[pair]*Cell // CPU pairs (different CPUs only)
	lines   map[uint64]*Line
	det     Cell // totals
}

type publication struct {
	line, addr uint64
	time, pc   uint64
	tid, cpu   uint32
	width      uint8
	valid      bool
}

type thread struct {
	name   string
	recent []uint64 // times of its last Window samples, a ring
	n      int      // samples so far
	tprev  []uint64 // per board entry: the publication last matched (t_prev)
}

type pair struct{ a, b uint32 } // a < b

func pairOf(x, y uint32) pair {
	if x > y {
		x, y = y, x
	}
	return pair{x, y}
}

// Cell is the communication between two threads or CPUs (or in total):
// estimated accesses (sums of periods) and raw detections, all and by
// kind.
type Cell struct {
	All, True, False                  uint64 // estimated accesses
	Detections, TrueCount, FalseCount uint64 // raw detections
}

// Add counts one detection weighing period.
func (c *Cell) Add(period uint64, trueSharing bool) {
	c.All += period
	c.Detections++
	if trueSharing {
		c.True += period
		c.TrueCount++
	} else {
		c.False += period
		c.FalseCount++
	}
}

// merge adds o's totals to c.
func (c *Cell) merge(o Cell) {
	c.All += o.All
	c.True += o.True
	c.False += o.False
	c.Detections += o.Detections
	c.TrueCount += o.TrueCount
	c.FalseCount += o.FalseCount
}

// Line is one shared cache line's communication, with the code behind it.
type Line struct {
	Addr uint64
	Cell
	PCs map[uint64]uint64 // instruction → detections it took part in (bounded)
}

const maxPCsPerLine = 8

func (d *Detector) process(pid uint32) *process {
	p := d.procs[pid]
	if p == nil {
		p = &process{board: make([]publication, d.o.Board), threads: map[uint32]*thread{},
			pairs: map[pair]*Cell{}, cpus: map[pair]*Cell{}, lines: map[uint64]*Line{}}
		d.procs[pid] = p
	}
	return p
}

func (d *Detector) thread(p *process, tid uint32) *thread {
	t := p.threads[tid]
	if t == nil {
		t = &thread{recent: make([]uint64, d.o.Window), tprev: make([]uint64, d.o.Board)}
		p.threads[tid] = t
	}
	return t
}

// fresh says whether a publication at time pt is fresh for thread t: fewer
// than Window of t's samples came after it.
func (t *thread) fresh(pt uint64) bool {
	w := len(t.recent)
	if t.n < w {
		return true
	}
	return t.recent[t.n%w] <= pt // the oldest of the last w samples
}

// fresh says whether publication e is fresh for its own thread: a thread
// forgotten (exited) no longer keeps it.
func (p *process) fresh(e *publication) bool {
	t := p.threads[e.tid]
	return t != nil && t.fresh(e.time)
}

func (t *thread) push(time uint64) {
	t.recent[t.n%len(t.recent)] = time
	t.n++
}

// SetName names a process (tid == pid) or a thread.
func (d *Detector) SetName(pid, tid uint32, name string) {
	p := d.process(pid)
	if tid == pid {
		p.comm = name
	}
	d.thread(p, tid).name = name
}

// Forget drops a process (it exited, or a new program was exec'd).
func (d *Detector) Forget(pid uint32) {
	if p := d.procs[pid]; p != nil {
		d.gone.merge(p.det)
	}
	delete(d.procs, pid)
}

// Threads are pid's threads with a row or state.
func (d *Detector) Threads(pid uint32) []uint32 {
	p := d.procs[pid]
	if p == nil {
		return nil
	}
	out := make([]uint32, 0, len(p.threads))
	for tid := range p.threads {
		out = append(out, tid)
	}
	slices.Sort(out)
	return out
}

// ForgetThreads drops threads of pid that exited: their state, their rows
// and the pairs they took part in. The process's totals and lines keep
// every detection; a reader may still detect a publication of theirs on
// the board (the data they wrote is there), which counts in the totals
// but in no pair, and, with no sample of theirs left to expire it, any
// store may replace it. A long-lived process that starts and ends threads
// would otherwise keep a row, and a matrix growing with their square, for
// every thread it ever had.
func (d *Detector) ForgetThreads(pid uint32, tids []uint32) {
	p := d.procs[pid]
	if p == nil {
		return
	}
	for _, tid := range tids {
		delete(p.threads, tid)
	}
	for pr := range p.pairs {
		if p.threads[pr.a] == nil || p.threads[pr.b] == nil {
			delete(p.pairs, pr)
		}
	}
}

// Detection is what Add found: nothing (Kind NotShared), or communication
// of the access's thread with Peer, which published from PeerCPU.
type Detection struct {
	Kind    cacheline.Kind
	Peer    uint32
	PeerCPU uint32
}

// Add runs Alg. 1 on one access.
func (d *Detector) Add(a *Access) Detection {
	var found Detection
	p := d.process(a.PID)
	t := d.thread(p, a.TID)
	line := a.Addr &^ (LineSize - 1)
	slot := int(line / LineSize % uint64(len(p.board)))
	e := &p.board[slot]
	if e.valid && e.line == line && e.tid != a.TID && e.time > t.tprev[slot] && t.fresh(e.time) {
		trueSharing := a.Addr < e.addr+uint64(max(e.width, 1)) && e.addr < a.Addr+uint64(max(a.Size, 1))
		d.detect(p, a, e, trueSharing, a.Period)
		t.tprev[slot] = e.time
		found = Detection{Kind: cacheline.FalseSharing, Peer: e.tid, PeerCPU: e.cpu}
		if trueSharing {
			found.Kind = cacheline.TrueSharing
		}
	}
	if a.Store && (!e.valid || e.line == line || !p.fresh(e)) {
		*e = publication{line: line, addr: a.Addr, time: a.Time, pc: a.IP, tid: a.TID, cpu: a.CPU, width: a.Size, valid: true}
	}
	t.push(a.Time)
	return found
}

func (d *Detector) detect(p *process, a *Access, e *publication, trueSharing bool, volume uint64) {
	p.det.Add(volume, trueSharing)
	if p.threads[a.TID] != nil && p.threads[e.tid] != nil { // else one has exited: no row
		c := p.pairs[pairOf(a.TID, e.tid)]
		if c == nil {
			c = &Cell{}
			p.pairs[pairOf(a.TID, e.tid)] = c
		}
		c.Add(volume, trueSharing)
	}
	if a.CPU != e.cpu {
		c := p.cpus[pairOf(a.CPU, e.cpu)]
		if c == nil {
			c = &Cell{}
			p.cpus[pairOf(a.CPU, e.cpu)] = c
		}
		c.Add(volume, trueSharing)
	}
	l := p.lines[e.line]
	if l == nil {
		if len(p.lines) >= d.o.MaxLines {
			return
		}
		l = &Line{Addr: e.line, PCs: map[uint64]uint64{}}
		p.lines[e.line] = l
	}
	l.Add(volume, trueSharing)
	for _, pc := range [2]uint64{a.IP, e.pc} {
		if _, ok := l.PCs[pc]; ok || len(l.PCs) < maxPCsPerLine {
			l.PCs[pc]++
		}
	}
}

// Matrix is one process's communication.
type Matrix struct {
	PID  uint32
	Comm string
	// Threads are the matrices' rows and columns: the threads that
	// communicated. A row of zeros says nothing, and a process of
	// thousands of threads of which a few share data would otherwise
	// report a matrix of millions of cells.
	Threads []uint32
	Names   []string // the threads' names
	// All, True and False are estimated accesses between threads:
	// symmetric, zero diagonal.
	All, True, False [][]uint64
	CPUs             []uint32
	CPUAll           [][]uint64
	Totals           Cell
	Lines            []Line // by estimated accesses, most first
}

// Report is every process with communication (or only pid when not 0), by
// total volume, most first.
func (d *Detector) Report(pid uint32, topLines int) []Matrix {
	var out []Matrix
	for id, p := range d.procs {
		if pid != 0 && id != pid {
			continue
		}
		out = append(out, p.matrix(id, topLines))
	}
	slices.SortFunc(out, func(a, b Matrix) int {
		if c := cmp.Compare(b.Totals.All, a.Totals.All); c != 0 {
			return c
		}
		return cmp.Compare(a.PID, b.PID)
	})
	return out
}

// members are the threads (or CPUs) of pairs, ascending.
func members(pairs map[pair]*Cell) []uint32 {
	seen := map[uint32]bool{}
	for pr := range pairs {
		seen[pr.a], seen[pr.b] = true, true
	}
	out := make([]uint32, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (p *process) matrix(pid uint32, topLines int) Matrix {
	m := Matrix{PID: pid, Comm: p.comm, Totals: p.det}
	m.Threads = members(p.pairs)
	idx := map[uint32]int{}
	for i, tid := range m.Threads {
		idx[tid] = i
		m.Names = append(m.Names, p.threads[tid].name)
	}
	m.All, m.True, m.False = square(len(m.Threads)), square(len(m.Threads)), square(len(m.Threads))
	for pr, c := range p.pairs {
		i, j := idx[pr.a], idx[pr.b]
		m.All[i][j], m.All[j][i] = c.All, c.All
		m.True[i][j], m.True[j][i] = c.True, c.True
		m.False[i][j], m.False[j][i] = c.False, c.False
	}
	m.CPUs = members(p.cpus)
	m.CPUAll = square(len(m.CPUs))
	for pr, c := range p.cpus {
		i, _ := slices.BinarySearch(m.CPUs, pr.a)
		j, _ := slices.BinarySearch(m.CPUs, pr.b)
		m.CPUAll[i][j], m.CPUAll[j][i] = c.All, c.All
	}
	for _, l := range p.lines {
		m.Lines = append(m.Lines, *l)
	}
	slices.SortFunc(m.Lines, func(a, b Line) int {
		if c := cmp.Compare(b.All, a.All); c != 0 {
			return c
		}
		return cmp.Compare(a.Addr, b.Addr)
	})
	if len(m.Lines) > topLines {
		m.Lines = m.Lines[:topLines]
	}
	// The report outlives the caller's lock: the code behind each line is
	// its own copy, not the map detections keep adding to.
	for i := range m.Lines {
		m.Lines[i].PCs = maps.Clone(m.Lines[i].PCs)
	}
	return m
}

func square(n int) [][]uint64 {
	m := make([][]uint64, n)
	for i := range m {
		m[i] = make([]uint64, n)
	}
	return m
}

// ProcessJSON is a process's matrices as /debug/comm and `pmu_exporter
// comm --format json` print them: matrices indexed like Threads and CPUs,
// in estimated accesses (sums of sampling periods); Detections are the raw
// detection counts behind them.
type ProcessJSON struct {
	PID         uint32         `json:"pid"`
	Comm        string         `json:"comm"`
	Threads     []uint32       `json:"threads"`
	ThreadNames []string       `json:"thread_names"`
	Detections  DetectionsJSON `json:"detections"`
	All         [][]uint64     `json:"all"`
	True        [][]uint64     `json:"true_sharing"`
	False       [][]uint64     `json:"false_sharing"`
	CPUs        []uint32       `json:"cpus"`
	CPUAll      [][]uint64     `json:"cpu_all"`
	Lines       []LineJSON     `json:"lines"`
}

// DetectionsJSON are raw detection counts.
type DetectionsJSON struct {
	True  uint64 `json:"true_sharing"`
	False uint64 `json:"false_sharing"`
}

// LineJSON is a shared line and the code behind it.
type LineJSON struct {
	Addr       string     `json:"addr"`
	All        uint64     `json:"all"`
	True       uint64     `json:"true_sharing"`
	False      uint64     `json:"false_sharing"`
	Detections uint64     `json:"detections"`
	Code       []CodeJSON `json:"code"`
}

// CodeJSON is an instruction that took part in a line's detections.
type CodeJSON struct {
	IP         string `json:"ip"`
	Symbol     string `json:"symbol,omitempty"`
	Detections uint64 `json:"detections"`
}

// ReportJSON is the whole report.
type ReportJSON struct {
	Processes []ProcessJSON `json:"processes"`
}

// JSON shapes matrices for printing; name, when set, names an instruction
// of a process (symbol+offset and object).
func JSON(ms []Matrix, name func(pid uint32, ip uint64) string) ReportJSON {
	r := ReportJSON{Processes: []ProcessJSON{}}
	for _, m := range ms {
		p := ProcessJSON{PID: m.PID, Comm: m.Comm, Threads: nonNil(m.Threads), ThreadNames: m.Names,
			Detections: DetectionsJSON{m.Totals.TrueCount, m.Totals.FalseCount},
			All:        m.All, True: m.True, False: m.False, CPUs: nonNil(m.CPUs), CPUAll: m.CPUAll, Lines: []LineJSON{}}
		if p.ThreadNames == nil {
			p.ThreadNames = []string{}
		}
		for _, l := range m.Lines {
			lj := LineJSON{Addr: hex(l.Addr), All: l.All, True: l.True, False: l.False, Detections: l.Detections}
			for pc, n := range l.PCs {
				c := CodeJSON{IP: hex(pc), Detections: n}
				if name != nil {
					c.Symbol = name(m.PID, pc)
				}
				lj.Code = append(lj.Code, c)
			}
			slices.SortFunc(lj.Code, func(a, b CodeJSON) int {
				if c := cmp.Compare(b.Detections, a.Detections); c != 0 {
					return c
				}
				return cmp.Compare(a.IP, b.IP)
			})
			p.Lines = append(p.Lines, lj)
		}
		r.Processes = append(r.Processes, p)
	}
	return r
}

func nonNil(v []uint32) []uint32 {
	if v == nil {
		return []uint32{}
	}
	return v
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// Totals are every detection so far, of processes still known and gone
// (a counter never goes down when a process exits).
func (d *Detector) Totals() Cell {
	t := d.gone
	for _, p := range d.procs {
		t.merge(p.det)
	}
	return t
}

// PIDs are the processes with state.
func (d *Detector) PIDs() []uint32 {
	out := make([]uint32, 0, len(d.procs))
	for pid := range d.procs {
		out = append(out, pid)
	}
	return out
}
