// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Per-cgroup attribution of the counting core's events, the way perf's bperf
 * cgroup mode does it: at every switch between tasks of different cgroups a
 * program reads each counted event on this CPU (counter, enabled, running)
 * from PERF_EVENT_ARRAYs and credits the change since the CPU's previous
 * credit to the outgoing task's own cgroup, in a per-CPU hash keyed by cgroup
 * id. A raw_tp program doing the same is run by user space on each CPU before
 * it reads (BPF_F_TEST_RUN_ON_CPU), so a task that never switches out is
 * credited too.
 *
 * The least possible is done per switch, because it runs at every one:
 *  - Ancestors are summed in user space, which knows the hierarchy. The
 *    program records a cgroup's ancestry once, when it first credits the
 *    cgroup (map "ancestors"), so that a cgroup that dies between two reads
 *    still reaches its ancestors. Crediting each ancestor here cost a hash
 *    lookup and an update of every event per level, at every switch.
 *  - The switch programs are BTF tracepoints (tp_btf): the tasks' cgroups
 *    and the run queue's clock are plain loads, where a raw tracepoint took
 *    a bpf_probe_read_kernel call for each, five of them before the early
 *    return at a switch within one cgroup.
 *
 * The switch credit runs on the sched_switch tracepoint, which returns at
 * once when both tasks are in the same cgroup. It used to be a perf_event
 * program on each CPU's cgroup-switches software event, but the kernel runs
 * such a program for none of the switches it counts while bpf_prog_active is
 * raised on that CPU, which a process preempted inside a BPF map syscall (this
 * exporter reading its own map, every interval) leaves raised for as long as
 * it waits. Tracepoint programs have a recursion guard of their own.
 *
 * Neither kind of program runs for a switch out of the idle task of a
 * secondary CPU (Linux 6.18: sched_switch was seen 19,064 times into idle on
 * CPU 1 and never out of it; CPU 0 is fine). So the switch into idle allows
 * the switch out of it to go by unseen, and the exit from an idle state (the
 * cpu_idle tracepoint) credits the idle span to the root: the task that runs
 * next is credited from there. Where the switch out of idle is seen, it is
 * passed over all the same: a credit there would give the root the few
 * microseconds since the idle exit, at the cost of a full credit per idle
 * cycle. A CPU that gets work before it enters an idle
 * state leaves idle without a cpu_idle exit, and its few microseconds of idle
 * go to that task. Before the switch into idle was seen, a whole interval of
 * the next task's run went unattributed then: up to a third of a 1.5 s busy
 * loop, measured on an idle 2-CPU machine.
 *
 * The cgroup-switches event stays open on each CPU as a check: its count
 * must advance by no more than the switches allowed for here; any other
 * unseen switch makes the counts since the last credit span several cgroups,
 * and they go to cgroup id 0, "unattributed", instead of to anyone in
 * particular.
 *
 * Which cgroup a task is in depends on the hierarchy that holds the perf_event
 * controller, because that is the one cgroup-switches compares: cgroup v2, or
 * v1's perf_event hierarchy. For v1 the program reads
 * task->cgroups->subsys[perf_event_cgrp_id]->cgroup with CO-RE; the kernfs
 * node id it ends in is the inode number of the cgroup's directory in that
 * hierarchy, as for v2.
 *
 * The license must be GPL-compatible for bpf_perf_event_read_value.
 */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "../../bpfinclude/task.h"

#define MAX_EVENTS 32 /* events attributed; the map value holds num_events of them */
#define MAX_DEPTH 16  /* ancestor levels recorded at most, plus the root's slot */

struct reading {
	__u64 counter;
	__u64 enabled;
	__u64 running;
};

/* Set by the loader before load; read-only to the program, so the verifier
 * treats them as constants. */
volatile const __u32 num_events = 1;
volatile const __u32 max_depth = 0; /* ancestor levels 1..max_depth are recorded */
volatile const __u32 perf_event_v1 = 0; /* perf_event is on a cgroup v1 hierarchy */

/* events_N[cpu] is the counting core's fd of event N on that CPU. One array per
 * event, indexed by CPU, because loaders size PERF_EVENT_ARRAYs to the CPUs. On
 * a hybrid host the same N may be a different event on each core type; user
 * space tells them apart by CPU. */
#define EVENT_ARRAY(n)                                    \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY); \
		__uint(key_size, sizeof(__u32));          \
		__uint(value_size, sizeof(__u32));        \
	} events_##n SEC(".maps")
EVENT_ARRAY(0);
EVENT_ARRAY(1);
EVENT_ARRAY(2);
EVENT_ARRAY(3);
EVENT_ARRAY(4);
EVENT_ARRAY(5);
EVENT_ARRAY(6);
EVENT_ARRAY(7);
EVENT_ARRAY(8);
EVENT_ARRAY(9);
EVENT_ARRAY(10);
EVENT_ARRAY(11);
EVENT_ARRAY(12);
EVENT_ARRAY(13);
EVENT_ARRAY(14);
EVENT_ARRAY(15);
EVENT_ARRAY(16);
EVENT_ARRAY(17);
EVENT_ARRAY(18);
EVENT_ARRAY(19);
EVENT_ARRAY(20);
EVENT_ARRAY(21);
EVENT_ARRAY(22);
EVENT_ARRAY(23);
EVENT_ARRAY(24);
EVENT_ARRAY(25);
EVENT_ARRAY(26);
EVENT_ARRAY(27);
EVENT_ARRAY(28);
EVENT_ARRAY(29);
EVENT_ARRAY(30);
EVENT_ARRAY(31);

/* switches[cpu] is that CPU's cgroup-switches event, the one the program is on. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} switches SEC(".maps");

/* read_switches reads this CPU's cgroup-switches count (no times: no clock). */
static __always_inline long read_switches(__u64 *counter)
{
	__u64 v = bpf_perf_event_read(&switches, BPF_F_CURRENT_CPU);
	if ((__s64)v < 0 && (__s64)v >= -4095)
		return -1;
	*counter = v;
	return 0;
}

/* The state of each CPU's credits that user space resets when it places a
 * CPU's events (previous, seen) is kept in plain arrays indexed by CPU, not in
 * per-CPU maps: user space can write a per-CPU map's value only for all CPUs
 * at once, so resetting one CPU rewrote every other CPU's state with what it
 * had read a moment before, and a CPU that credited in between credited that
 * span again at its next credit (measured: 12-25% more than counted on the
 * other CPU while one CPU's events were placed in a loop). */

/* This CPU's switch count at its previous credit, and how many cgroup
 * switches that credit allowed for: the one about to be counted
 * (sched_switch comes first) and an unseen one out of idle. Padded to a cache
 * line: every credit writes it. */
struct seen_state {
	__u64 switches;
	__u64 pending;
	__u64 clock; /* the run queue's clock at the previous credit */
	__u64 pad[5];
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* the loader sets it to the possible CPUs */
	__type(key, __u32);
	__type(value, struct seen_state);
} seen SEC(".maps");

/* read_value reads event i with its enabled and running times. Each of those
 * takes the kernel's clock (perf_clock), as does the event's own read for the
 * clock events: a few tens of ns each in a guest. */
static __always_inline long read_value(__u32 i, struct bpf_perf_event_value *v)
{
	switch (i) {
#define READ(n) case n: return bpf_perf_event_read_value(&events_##n, BPF_F_CURRENT_CPU, v, sizeof(*v))
	READ(0); READ(1); READ(2); READ(3); READ(4); READ(5); READ(6); READ(7);
	READ(8); READ(9); READ(10); READ(11); READ(12); READ(13); READ(14); READ(15);
	READ(16); READ(17); READ(18); READ(19); READ(20); READ(21); READ(22); READ(23);
	READ(24); READ(25); READ(26); READ(27); READ(28); READ(29); READ(30); READ(31);
#undef READ
	}
	return -1;
}

/* read_counter reads event i's count alone: no clock, but for the clock
 * events' own. bpf_perf_event_read returns an error as a negative errno in
 * the count. */
static __always_inline long read_counter(__u32 i, __u64 *counter)
{
	__u64 v;
	switch (i) {
#define READ(n) case n: v = bpf_perf_event_read(&events_##n, BPF_F_CURRENT_CPU); break
	READ(0); READ(1); READ(2); READ(3); READ(4); READ(5); READ(6); READ(7);
	READ(8); READ(9); READ(10); READ(11); READ(12); READ(13); READ(14); READ(15);
	READ(16); READ(17); READ(18); READ(19); READ(20); READ(21); READ(22); READ(23);
	READ(24); READ(25); READ(26); READ(27); READ(28); READ(29); READ(30); READ(31);
#undef READ
	default:
		return -1;
	}
	if ((__s64)v < 0 && (__s64)v >= -4095)
		return -1;
	*counter = v;
	return 0;
}

/* How an event is read at a credit (set by user space with the slot):
 *  - READ_VALUE: count, enabled and running of its own;
 *  - READ_COUNTER: its count; the enabled and running times of the slot
 *    "from", a member of the same perf group read before it in this credit
 *    (members of a group are scheduled in and out together, so their times
 *    are the same);
 *  - READ_TASK_CLOCK: task-clock, whose count is its running time (both
 *    advance by the context's time while it runs), taken from "from" with
 *    no read at all. */
enum { READ_VALUE, READ_COUNTER, READ_TASK_CLOCK };

/* One event of one CPU: its reading at the CPU's previous credit, and how it
 * is read. Event i of CPU c is at c * MAX_EVENTS + i, so that a CPU's
 * slots share no cache line with another's. */
struct slot {
	__u64 counter;
	__u64 enabled;
	__u64 running;
	__u32 how;
	__u32 from;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_EVENTS); /* the loader sets it to MAX_EVENTS * possible CPUs */
	__type(key, __u32);
	__type(value, struct slot);
} previous SEC(".maps");

/* cgroup id -> num_events readings accumulated on this CPU: the cgroup's own
 * tasks only. The loader sets value_size to num_events * sizeof(struct
 * reading) and max_entries. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct reading[MAX_EVENTS]);
} cgroups SEC(".maps");

/* A cgroup's ancestors, recorded when the program first credits it: id[l] is
 * its ancestor at level l for l in 1..max_depth above its own level, 0
 * elsewhere. User space sums each cgroup's credits into these. The loader
 * sets value_size to (max_depth + 1) ids and max_entries to the cgroup
 * map's. */
struct ancestry {
	__u64 id[MAX_DEPTH];
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* the loader sets it to the cgroup map's */
	__type(key, __u64);
	__type(value, struct ancestry);
} ancestors SEC(".maps");

/* Per CPU: 0 credits lost because the cgroup map was full, 1 event reads that
 * failed, 2 credits made, 3 switches the program did not run for, 4 credits
 * that went to "unattributed" because of them; then each program's runs,
 * early returns included (the kernel counts them only while bpf_stats are
 * on, which slows every BPF program on the node): 5 sched_switch, 6
 * cpu_idle, 7 cgroup_attach_task, 8 credit_now. */
enum {
	STAT_MAP_FULL, STAT_READ_FAILED, STAT_CREDITS, STAT_SWITCHES_MISSED, STAT_UNATTRIBUTED,
	STAT_RUNS_SWITCH, STAT_RUNS_IDLE, STAT_RUNS_ATTACH, STAT_RUNS_CREDIT_NOW, STAT_MAX
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Index 0: a zeroed value to insert new cgroups with; 1: this credit's deltas;
 * 2: the part of them nobody can be given. Maps, because MAX_EVENTS readings
 * do not fit the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, struct reading[MAX_EVENTS]);
} scratch SEC(".maps");

static __always_inline void count(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &stat);
	if (v)
		*v += n;
}

/* record_ancestry stores the ancestors of the current task's cgroup cgrp
 * (id id) the first time it is credited. */
static __always_inline int record_ancestry(__u64 id, struct cgroup *cgrp)
{
	__u32 k = 0;
	struct ancestry *a = bpf_map_lookup_elem(&scratch, &k); /* zeroed, large enough */
	if (!a)
		return -1;
	if (perf_event_v1) {
		int own = BPF_CORE_READ(cgrp, level);
		for (int level = 1; level < MAX_DEPTH; level++) {
			if (level > max_depth || level >= own)
				break;
			a->id[level] = BPF_CORE_READ(cgrp, ancestors[level], kn, id);
		}
	} else {
		for (int level = 1; level < MAX_DEPTH; level++) {
			if (level > max_depth)
				break;
			__u64 ancestor = bpf_get_current_ancestor_cgroup_id(level);
			if (!ancestor || ancestor == id)
				break; /* at or below the task's own level */
			a->id[level] = ancestor;
		}
	}
	/* EEXIST when another CPU recorded it first: fine either way. */
	long err = bpf_map_update_elem(&ancestors, &id, a, BPF_NOEXIST);
	/* The zeroed scratch is the new cgroup's first value too: clear again. */
	for (int level = 1; level < MAX_DEPTH; level++)
		a->id[level] = 0;
	return err && err != -17 /* EEXIST */ ? -1 : 0;
}

/* add gives delta to cgroup id, whose tasks are the current one's (cgrp: its
 * cgroup; none for Unattributed, which has no ancestry). */
static __always_inline void add(__u64 id, struct cgroup *cgrp, struct reading *delta)
{
	struct reading *acc = bpf_map_lookup_elem(&cgroups, &id);
	if (!acc) {
		__u32 k = 0;
		struct reading *z = bpf_map_lookup_elem(&scratch, &k);
		if (!z)
			return;
		if (cgrp && record_ancestry(id, cgrp)) {
			count(STAT_MAP_FULL, 1);
			return;
		}
		/* EEXIST when another CPU inserted it first: fine either way. */
		bpf_map_update_elem(&cgroups, &id, z, BPF_NOEXIST);
		acc = bpf_map_lookup_elem(&cgroups, &id);
		if (!acc) {
			count(STAT_MAP_FULL, 1);
			return;
		}
	}
	for (__u32 i = 0; i < MAX_EVENTS; i++) {
		if (i >= num_events)
			break;
		acc[i].counter += delta[i].counter;
		acc[i].enabled += delta[i].enabled;
		acc[i].running += delta[i].running;
	}
}

/* attributable says whether the counts since this CPU's previous credit
 * belong to the current task's cgroup alone: no cgroup switch went by but the
 * ones the previous credit allowed for. It records this credit as the
 * previous one (pending switches allowed for, the run queue's clock now) and
 * returns the clock of the previous one in *last_clock. */
static __always_inline int attributable(struct bpf_perf_event_value *sw, int pending, __u64 now, __u64 *last_clock)
{
	__u32 k = bpf_get_smp_processor_id();
	struct seen_state *last = bpf_map_lookup_elem(&seen, &k);
	if (!last)
		return 1;
	__u64 expected = last->switches + last->pending;
	*last_clock = last->clock;
	last->switches = sw->counter;
	last->pending = pending;
	last->clock = now;
	if (sw->counter > expected) {
		count(STAT_SWITCHES_MISSED, sw->counter - expected);
		return 0;
	}
	return 1;
}

/* share is v * f / 65536 without overflowing 64 bits (f <= 65536). */
static __always_inline __u64 share(__u64 v, __u64 f)
{
	return (v >> 16) * f + (((v & 0xffff) * f) >> 16);
}

/* The current task as the program sees it: its cgroup in the hierarchy of
 * perf_event and that cgroup's id, the run queue's clock (sched_clock, ns, as
 * the scheduler last updated it; 0 where the kernel lacks the fields), and
 * when the task last arrived on this CPU (in that clock). */
struct current {
	struct cgroup *cgrp;
	__u64 id;
	__u64 now;
	struct task_struct *task;
};

/* perf_cgroup is the cgroup whose change makes a cgroup switch (see
 * task_cgroup). */
static __always_inline struct cgroup *perf_cgroup(struct task_struct *task)
{
	return task_cgroup(task, perf_event_v1);
}

/* current_btf describes task, a BTF pointer to the current task. */
static __always_inline struct current current_btf(struct task_struct *task, struct cgroup *cgrp)
{
	struct current c = {.cgrp = cgrp, .task = task};
	if (cgrp)
		c.id = cgrp->kn->id;
	if (bpf_core_field_exists(task->se.cfs_rq))
		c.now = task->se.cfs_rq->rq->clock;
	return c;
}

/* current_probed describes the current task where its pointer is not a BTF
 * one (the raw_tp credit run by user space): through probe reads. */
static __always_inline struct current current_probed(void)
{
	struct task_struct *task = (void *)bpf_get_current_task();
	struct current c = {.task = task};
	if (perf_event_v1) {
		int subsys = bpf_core_enum_value(enum cgroup_subsys_id, perf_event_cgrp_id);
		if (subsys >= 0 && subsys < 64)
			c.cgrp = BPF_CORE_READ(task, cgroups, subsys[subsys], cgroup);
	} else {
		c.cgrp = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	}
	/* A local, not c.cgrp: inside BPF_CORE_READ the access to c's field
	 * would become a relocation against a kernel type "current". */
	struct cgroup *cgrp = c.cgrp;
	if (cgrp)
		c.id = BPF_CORE_READ(cgrp, kn, id);
	if (bpf_core_field_exists(task->se.cfs_rq))
		c.now = BPF_CORE_READ(task, se.cfs_rq, rq, clock);
	return c;
}

/* credit gives this CPU's counts since its previous credit to the current
 * task's cgroup, or to "unattributed" when a switch went by unseen or moved
 * says the current task changed cgroups during the span. */
static __always_inline int credit(int pending, int moved, struct current *cur)
{
	struct bpf_perf_event_value sw = {};
	/* A CPU without the program attached has nothing placed to credit. */
	if (read_switches(&sw.counter))
		return 0;
	__u32 one = 1, cpu = bpf_get_smp_processor_id();
	struct reading *delta = bpf_map_lookup_elem(&scratch, &one);
	if (!delta)
		return 0;
	__u32 fresh = 0; /* the slots read in this credit, as sources of times */
	for (__u32 i = 0; i < MAX_EVENTS; i++) {
		if (i >= num_events)
			break;
		delta[i].counter = delta[i].enabled = delta[i].running = 0;
		__u32 k = cpu * MAX_EVENTS + i;
		struct slot *prev = bpf_map_lookup_elem(&previous, &k);
		if (!prev)
			continue;
		struct bpf_perf_event_value v;
		long err = -1;
		__u32 from = prev->from;
		if (prev->how != READ_VALUE && from < i && (fresh & (1u << from))) {
			__u32 fk = cpu * MAX_EVENTS + from;
			struct slot *src = bpf_map_lookup_elem(&previous, &fk);
			if (src) {
				v.enabled = src->enabled;
				v.running = src->running;
				if (prev->how == READ_TASK_CLOCK) {
					v.counter = src->running;
					err = 0;
				} else {
					err = read_counter(i, &v.counter);
				}
			}
		} else {
			/* An event not open on this CPU (another core type, a
			 * group that failed) reads as an error: nothing to
			 * credit. So does one whose source could not be read. */
			err = read_value(i, &v);
		}
		if (err) {
			count(STAT_READ_FAILED, 1);
			continue;
		}
		fresh |= 1u << i;
		/* The first reading after an fd was (re)placed starts from zero. */
		if (v.counter >= prev->counter && v.enabled >= prev->enabled && v.running >= prev->running) {
			delta[i].counter = v.counter - prev->counter;
			delta[i].enabled = v.enabled - prev->enabled;
			delta[i].running = v.running - prev->running;
		}
		prev->counter = v.counter;
		prev->enabled = v.enabled;
		prev->running = v.running;
	}
	__u64 now = cur->now, last_clock = 0;
	if (moved || !attributable(&sw, pending, now, &last_clock)) {
		/* A switch went by unseen. When the current task arrived on this
		 * CPU after the previous credit (the unseen switch brought it in:
		 * sched_info's last_arrival, in the run queue's clock), the span
		 * from its arrival is its own; the part before it is nobody's in
		 * particular. Time events split exactly; other counts in
		 * proportion to time. */
		struct task_struct *task = cur->task;
		__u64 arrival = bpf_core_field_exists(task->sched_info.last_arrival) ? BPF_CORE_READ(task, sched_info.last_arrival) : 0;
		__u32 two = 2;
		struct reading *rest = bpf_map_lookup_elem(&scratch, &two);
		if (moved || !rest || !now || !last_clock || arrival <= last_clock || now <= arrival) {
			add(0, 0, delta);
			count(STAT_UNATTRIBUTED, 1);
			return 0;
		}
		__u64 f = ((now - arrival) << 16) / (now - last_clock);
		for (__u32 i = 0; i < MAX_EVENTS; i++) {
			if (i >= num_events)
				break;
			__u64 c = share(delta[i].counter, f), e = share(delta[i].enabled, f), r = share(delta[i].running, f);
			rest[i].counter = delta[i].counter - c;
			rest[i].enabled = delta[i].enabled - e;
			rest[i].running = delta[i].running - r;
			delta[i].counter = c;
			delta[i].enabled = e;
			delta[i].running = r;
		}
		add(0, 0, rest);
		count(STAT_UNATTRIBUTED, 1);
	}
	if (cur->cgrp)
		add(cur->id, cur->cgrp, delta);
	count(STAT_CREDITS, 1);
	return 0;
}

SEC("raw_tp")
int credit_now(void *ctx)
{
	count(STAT_RUNS_CREDIT_NOW, 1);
	struct current cur = current_probed();
	return credit(0, 0, &cur);
}

/* A task that moves itself to another cgroup while it runs (a shell's
 * `echo $$ > cgroup.procs`, then exec) would take this CPU's open span into
 * its new cgroup at its next switch: the time of every task of its old
 * cgroup since the last switch between cgroups, measured at up to a fifth of
 * a 300 ms process on a busy machine. The cgroup_attach_task tracepoint
 * comes after the move, when the old cgroup is no longer known, so the span
 * goes to "unattributed" instead of to the wrong cgroup. A move of another
 * process (container runtimes move tasks that wait) leaves the writer in its
 * cgroup: its span is credited to it as usual. A running task moved by
 * another process from another CPU is not covered.
 * cgroup_attach_task(struct cgroup *dst, const char *path,
 *                    struct task_struct *task, bool threadgroup) */
SEC("tp_btf/cgroup_attach_task")
int on_cgroup_attach(unsigned long long *ctx)
{
	count(STAT_RUNS_ATTACH, 1);
	struct task_struct *task = (void *)ctx[2], *self = bpf_get_current_task_btf();
	int moved = task == self;
	if (!moved && ctx[3]) /* a whole thread group: is it ours? */
		moved = task->tgid == self->tgid;
	struct current cur = current_btf(self, perf_cgroup(self));
	return credit(0, moved, &cur);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct
 * *next, unsigned int prev_state) fires before the switch, with prev current:
 * the cgroup-switches counter does not include this switch yet. A switch into
 * idle is credited even within the root: it allows for the unseen switch out. */
SEC("tp_btf/sched_switch")
int on_switch(unsigned long long *ctx)
{
	count(STAT_RUNS_SWITCH, 1);
	struct task_struct *prev = (void *)ctx[1], *next = (void *)ctx[2];
	/* A switch out of idle is never credited: the exit from the idle state
	 * credited the idle span already, or, where the CPU got work before it
	 * entered one, its few microseconds go to the next task, as on every
	 * CPU whose switches out of idle the kernel does not show. The switch
	 * into idle and the idle exit allowed for it. */
	if (prev->pid == 0)
		return 0;
	struct cgroup *from = perf_cgroup(prev);
	int differ = from != perf_cgroup(next);
	int into_idle = next->pid == 0;
	if (!differ && !into_idle)
		return 0;
	struct current cur = current_btf(prev, from);
	return credit(differ + into_idle, 0, &cur);
}

#define PWR_EVENT_EXIT ((__u32)-1) /* cpu_idle's state when the CPU leaves idle */

/* cpu_idle(unsigned int state, unsigned int cpu_id): the idle task is current.
 * The idle span goes to the root; the switch out may still go by unseen. */
SEC("tp_btf/cpu_idle")
int on_idle_exit(unsigned long long *ctx)
{
	count(STAT_RUNS_IDLE, 1);
	if ((__u32)ctx[0] != PWR_EVENT_EXIT)
		return 0;
	struct task_struct *idle = bpf_get_current_task_btf();
	struct current cur = current_btf(idle, perf_cgroup(idle));
	return credit(1, 0, &cur);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
