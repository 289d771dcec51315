// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Run-queue wait per cgroup, and who held the CPU meanwhile.
 *
 * The kernel already measures every task's run-queue wait exactly:
 * sched_info.run_delay (what /proc/PID/schedstat's second field shows) sums
 * the time the task was queued and not running, from each enqueue (a wakeup,
 * a preemption, a migration's arrival) to the switch that runs it, in the run
 * queue's clock. So the program hooks no wakeup: at each switch out of a task
 * it takes the growth of the task's run_delay since its previous switch out
 * (kept in task storage), which is the one wait that preceded the run now
 * ending (migrations fold their part into run_delay on the way), and gives it
 * to the task's cgroup: a count, a sum and a histogram bucket. The sum is
 * then the kernel's own accounting, summed over the cgroup's threads, which is
 * the oracle the tests hold it to.
 *
 * A switch out is seen for every task: the kernel skips the tracepoint's
 * programs for the switch out of a secondary CPU's idle task only (see
 * kernel/cgroupbpf), and idle waits for nothing. The task's last run before
 * it exits ends with a switch out too (prev_state TASK_DEAD).
 *
 * A task first seen by the program was either born after it was loaded
 * (start_time, CLOCK_MONOTONIC, after loaded_at): all of its run_delay is
 * then since the load and is charged; or it is older, and its run_delay so
 * far is taken as the base, its wait before this run not charged (counted in
 * STAT_FIRST_SEEN).
 *
 * Holders. Every switch out also ends a segment of this CPU's time, from the
 * task's arrival (sched_info.last_arrival) to now, which the program keeps in
 * a ring of this CPU's recent segments with the task's cgroup. A wait that
 * ended with the task's arrival here began wait ns before it; the ring's
 * segments overlapping that span are who held the CPU, each charged its
 * overlap as the (victim, holder) pair. What no segment covers (the CPU idle
 * after a wakeup, or more than RING segments back) goes to holder 0, "none".
 * A wait that began on another CPU and migrated here is laid on this CPU's
 * time whole: its early part is charged to whoever ran here then.
 *
 * The license must be GPL-compatible for task storage.
 */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "../../bpfinclude/task.h"

#define BUCKETS 12 /* waits up to 1 µs, 4 µs, ... 4^10 µs, and beyond */
#define RING 16    /* segments of a CPU's time kept for the holders */

volatile const __u64 loaded_at = 0;     /* CLOCK_MONOTONIC ns when the loader started */
volatile const __u32 perf_event_v1 = 0; /* cgroups are v1's perf_event hierarchy's */

/* A cgroup's waits on this CPU: how many, their sum (ns), and how many in
 * each bucket (not cumulative). */
struct wait {
	__u64 count;
	__u64 sum;
	__u64 bucket[BUCKETS];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024); /* the loader sets it */
	__type(key, __u64);
	__type(value, struct wait);
} waits SEC(".maps");

/* ns a victim cgroup waited while a holder cgroup ran on the CPU. */
struct pair {
	__u64 victim;
	__u64 holder;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096); /* the loader sets it */
	__type(key, struct pair);
	__type(value, __u64);
} pairs SEC(".maps");

/* A CPU's recent segments: [start, end) ran cgroup cg, in the run queue's
 * clock; next is where the next one goes. An ARRAY indexed by CPU (the
 * loader sizes it), not a per-CPU map, so that another CPU can read it. */
struct ring {
	__u64 start[RING];
	__u64 end[RING];
	__u64 cg[RING];
	__u32 next;
	__u32 pad;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ring);
} rings SEC(".maps");

/* A task's run_delay at its previous switch out. */
struct seen {
	__u64 run_delay;
};
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct seen);
} tasks SEC(".maps");

/* Per CPU: 0 runs, 1 waits dropped (the waits map full), 2 pairs dropped
 * (the pairs map full), 3 tasks first seen with a run_delay from before the
 * load (their wait before that run not charged), 4 task storage refused. */
enum { STAT_RUNS, STAT_WAITS_FULL, STAT_PAIRS_FULL, STAT_FIRST_SEEN, STAT_NO_STORAGE, STAT_MAX };
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &stat);
	if (v)
		*v += 1;
}

static __always_inline __u64 cgroup_id(struct task_struct *task)
{
	struct cgroup *cg = task_cgroup(task, perf_event_v1);
	return cg ? cg->kn->id : 0;
}

/* bucket is the histogram bucket of a wait of ns: the first k with ns <=
 * 1000 * 4^k, or the last. */
static __always_inline __u32 bucket(__u64 ns)
{
	__u64 bound = 1000;
	for (__u32 k = 0; k < BUCKETS - 1; k++) {
		if (ns <= bound)
			return k;
		bound <<= 2;
	}
	return BUCKETS - 1;
}

static __always_inline void add_wait(__u64 cg, __u64 ns)
{
	struct wait *w = bpf_map_lookup_elem(&waits, &cg);
	if (!w) {
		struct wait zero = {};
		bpf_map_update_elem(&waits, &cg, &zero, BPF_NOEXIST);
		w = bpf_map_lookup_elem(&waits, &cg);
		if (!w) {
			count(STAT_WAITS_FULL);
			return;
		}
	}
	w->count++;
	w->sum += ns;
	__u32 b = bucket(ns);
	if (b < BUCKETS)
		w->bucket[b]++;
}

static __always_inline void add_pair(__u64 victim, __u64 holder, __u64 ns)
{
	struct pair k = {.victim = victim, .holder = holder};
	__u64 *v = bpf_map_lookup_elem(&pairs, &k);
	if (v) {
		*v += ns;
		return;
	}
	if (bpf_map_update_elem(&pairs, &k, &ns, BPF_NOEXIST)) {
		v = bpf_map_lookup_elem(&pairs, &k); /* another path inserted it */
		if (v)
			*v += ns;
		else
			count(STAT_PAIRS_FULL);
	}
}

/* charge_holders gives victim's wait [from, to) to the cgroups of the ring's
 * segments overlapping it, newest first, and what none covers to holder 0. */
static __always_inline void charge_holders(struct ring *r, __u64 victim, __u64 from, __u64 to)
{
	__u64 covered = 0;
	__u32 i = r->next;
	for (__u32 n = 0; n < RING; n++) {
		i = (i + RING - 1) % RING;
		__u64 s = r->start[i], e = r->end[i];
		if (e <= from || e == 0)
			break; /* older segments end earlier still */
		if (s < from)
			s = from;
		if (e > to)
			e = to;
		if (e > s) {
			add_pair(victim, r->cg[i], e - s);
			covered += e - s;
		}
	}
	if (to - from > covered)
		add_pair(victim, 0, to - from - covered);
}

/* end_segment records [start, end) of cg as this CPU's newest segment,
 * extending the newest one where it is the same cgroup's and adjoins. */
static __always_inline void end_segment(struct ring *r, __u64 cg, __u64 start, __u64 end)
{
	__u32 last = (r->next + RING - 1) % RING;
	if (r->cg[last] == cg && r->end[last] == start && r->end[last] != 0) {
		r->end[last] = end;
		return;
	}
	__u32 i = r->next % RING;
	r->start[i] = start;
	r->end[i] = end;
	r->cg[i] = cg;
	r->next = (i + 1) % RING;
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct
 * *next, unsigned int prev_state), before the switch: prev's run ends now. */
SEC("tp_btf/sched_switch")
int on_switch(unsigned long long *ctx)
{
	count(STAT_RUNS);
	struct task_struct *prev = (void *)ctx[1];
	if (prev->pid == 0)
		return 0; /* idle waited for nothing */
	__u64 now = prev->se.cfs_rq->rq->clock;
	__u64 arrival = prev->sched_info.last_arrival;
	__u64 delay = prev->sched_info.run_delay;
	__u64 cg = cgroup_id(prev);
	__u32 cpu = bpf_get_smp_processor_id();
	struct ring *r = bpf_map_lookup_elem(&rings, &cpu);

	struct seen *s = bpf_task_storage_get(&tasks, prev, 0, 0);
	__u64 wait = 0;
	int charge = 0;
	if (s) {
		wait = delay - s->run_delay;
		charge = 1;
	} else {
		s = bpf_task_storage_get(&tasks, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!s)
			count(STAT_NO_STORAGE);
		else if (prev->start_time >= loaded_at)
			wait = delay, charge = 1;
		else
			count(STAT_FIRST_SEEN);
	}
	if (s)
		s->run_delay = delay;
	if (charge) {
		/* One wait preceded this run (0 ns where it ran at once). */
		add_wait(cg, wait);
		if (wait > 0 && r && arrival > wait)
			charge_holders(r, cg, arrival - wait, arrival);
		else if (wait > 0)
			add_pair(cg, 0, wait);
	}
	if (r && now > arrival && arrival > 0)
		end_segment(r, cg, arrival, now);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
