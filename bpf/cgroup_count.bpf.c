// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Per-cgroup attribution of the counting core's events, the way perf's bperf
 * cgroup mode does it: a perf_event program on each CPU's cgroup-switches
 * software event (sample_period 1) runs when the CPU switches between tasks of
 * different cgroups, in the context of the outgoing task. It reads each counted
 * event on this CPU (counter, enabled, running) from PERF_EVENT_ARRAYs and
 * credits the change since the previous switch to the outgoing task's cgroup
 * and to its ancestors down from level 1, in a per-CPU hash keyed by cgroup id.
 * A raw_tp program doing the same is run by user space on each CPU before it
 * reads (BPF_F_TEST_RUN_ON_CPU), so a task that never switches out is credited
 * too. No sched_switch hook: programs run only on cgroup changes.
 *
 * The kernel does not run the program on every cgroup switch it counts. On
 * Linux 6.18 it never overflows the event when the outgoing task is the idle
 * task of a secondary CPU (CPU 0's idle task is fine): the switch is counted,
 * but neither a BPF program nor a ring buffer sees it. A skipped switch would
 * hand the idle span and the next task's run to whoever switches out next, so
 * the program also credits at each idle exit (the cpu_idle tracepoint, which
 * fires far less often than sched_switch), in the idle task's context: the idle
 * span goes to the root, and the one switch that follows an idle exit is
 * allowed to go by unseen. Any other unseen switch is caught by comparing the
 * switch counter with the program's own count: the counts since the last credit
 * then span several cgroups and go to cgroup id 0, "unattributed", instead of
 * to anyone in particular.
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

#define MAX_EVENTS 32 /* events attributed; the map value holds num_events of them */
#define MAX_DEPTH 16  /* ancestor levels credited at most */

struct reading {
	__u64 counter;
	__u64 enabled;
	__u64 running;
};

/* Set by the loader before load; read-only to the program, so the verifier
 * treats them as constants. */
volatile const __u32 num_events = 1;
volatile const __u32 max_depth = 0; /* ancestor levels 1..max_depth are credited */
volatile const __u32 perf_event_v1 = 0; /* perf_event is on a cgroup v1 hierarchy */

/* The kernel's structs, as far as the v1 lookup reads them; CO-RE relocates
 * the offsets to the running kernel's BTF. */
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));
struct cgroup {
	struct kernfs_node *kn;
	int level;
	struct cgroup *ancestors[]; /* Linux 6.1+: older kernels fail the load in v1 mode */
} __attribute__((preserve_access_index));
struct cgroup_subsys_state {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));
struct css_set {
	struct cgroup_subsys_state *subsys[1];
} __attribute__((preserve_access_index));
struct task_struct {
	struct css_set *cgroups;
	int tgid;
} __attribute__((preserve_access_index));
enum cgroup_subsys_id {
	perf_event_cgrp_id = 0, /* relocated to the kernel's value */
};

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

/* This CPU's switch count at its previous credit, and whether that credit was
 * at an idle exit (then the switch out of the idle task may go by unseen). */
struct seen_state {
	__u64 switches;
	__u64 idle_exit;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct seen_state);
} seen SEC(".maps");

static __always_inline long read_event(__u32 i, struct bpf_perf_event_value *v)
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

/* The readings at this CPU's previous credit, per event. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_EVENTS);
	__type(key, __u32);
	__type(value, struct reading);
} previous SEC(".maps");

/* cgroup id -> num_events readings accumulated on this CPU. The loader sets
 * value_size to num_events * sizeof(struct reading) and max_entries. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct reading[MAX_EVENTS]);
} cgroups SEC(".maps");

/* Per CPU: 0 credits lost because the cgroup map was full, 1 event reads that
 * failed, 2 credits made, 3 switches the program did not run for, 4 credits
 * that went to "unattributed" because of them. */
enum { STAT_MAP_FULL, STAT_READ_FAILED, STAT_CREDITS, STAT_SWITCHES_MISSED, STAT_UNATTRIBUTED, STAT_MAX };
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Index 0: a zeroed value to insert new cgroups with; 1: this credit's deltas.
 * Maps, because MAX_EVENTS readings do not fit the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct reading[MAX_EVENTS]);
} scratch SEC(".maps");

static __always_inline void count(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &stat);
	if (v)
		*v += n;
}

static __always_inline void add(__u64 id, struct reading *delta)
{
	struct reading *acc = bpf_map_lookup_elem(&cgroups, &id);
	if (!acc) {
		__u32 k = 0;
		struct reading *z = bpf_map_lookup_elem(&scratch, &k);
		if (!z)
			return;
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
 * belong to the current task's cgroup alone: no switch went by unseen but the
 * one allowed after an idle exit. It records this credit as the previous one. */
static __always_inline int attributable(struct bpf_perf_event_value *sw, int at_switch, int idle_exit)
{
	__u32 k = 0;
	struct seen_state *last = bpf_map_lookup_elem(&seen, &k);
	if (!last)
		return 1;
	/* At a switch the counter already includes this one. */
	__u64 expected = last->switches + (at_switch ? 1 : 0) + (last->idle_exit ? 1 : 0);
	last->switches = sw->counter;
	last->idle_exit = idle_exit;
	if (sw->counter > expected) {
		count(STAT_SWITCHES_MISSED, sw->counter - expected);
		return 0;
	}
	return 1;
}

/* credit_v2 gives delta to the current task's cgroup v2 and its ancestors. */
static __always_inline void credit_v2(struct reading *delta)
{
	__u64 id = bpf_get_current_cgroup_id();
	add(id, delta);
	for (int level = 1; level < MAX_DEPTH; level++) {
		if (level > max_depth)
			break;
		__u64 ancestor = bpf_get_current_ancestor_cgroup_id(level);
		if (!ancestor || ancestor == id)
			break; /* above the task's own level */
		add(ancestor, delta);
	}
}

/* credit_v1 does the same in v1's perf_event hierarchy. */
static __always_inline void credit_v1(struct reading *delta)
{
	struct task_struct *task = (void *)bpf_get_current_task();
	int subsys = bpf_core_enum_value(enum cgroup_subsys_id, perf_event_cgrp_id);
	if (subsys < 0 || subsys >= 64)
		return;
	struct cgroup *cgrp = BPF_CORE_READ(task, cgroups, subsys[subsys], cgroup);
	if (!cgrp)
		return;
	add(BPF_CORE_READ(cgrp, kn, id), delta);
	int own = BPF_CORE_READ(cgrp, level);
	for (int level = 1; level < MAX_DEPTH; level++) {
		if (level > max_depth || level >= own)
			break; /* own is the task's cgroup, credited above */
		__u64 ancestor = BPF_CORE_READ(cgrp, ancestors[level], kn, id);
		if (ancestor)
			add(ancestor, delta);
	}
}

/* credit gives this CPU's counts since its previous credit to the current
 * task's cgroup and its ancestors, or to "unattributed" when a switch went by
 * unseen or moved says the current task changed cgroups during the span. */
static __always_inline int credit(int at_switch, int idle_exit, int moved)
{
	struct bpf_perf_event_value sw;
	/* A CPU without the program attached has nothing placed to credit. */
	if (bpf_perf_event_read_value(&switches, BPF_F_CURRENT_CPU, &sw, sizeof(sw)))
		return 0;
	__u32 one = 1;
	struct reading *delta = bpf_map_lookup_elem(&scratch, &one);
	if (!delta)
		return 0;
	for (__u32 i = 0; i < MAX_EVENTS; i++) {
		if (i >= num_events)
			break;
		delta[i].counter = delta[i].enabled = delta[i].running = 0;
		struct bpf_perf_event_value v;
		/* An event not open on this CPU (another core type, a group that
		 * failed) reads as an error: nothing to credit. */
		if (read_event(i, &v)) {
			count(STAT_READ_FAILED, 1);
			continue;
		}
		__u32 k = i;
		struct reading *prev = bpf_map_lookup_elem(&previous, &k);
		if (!prev)
			continue;
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
	if (!attributable(&sw, at_switch, idle_exit) || moved) {
		add(0, delta);
		count(STAT_UNATTRIBUTED, 1);
		return 0;
	}
	if (perf_event_v1)
		credit_v1(delta);
	else
		credit_v2(delta);
	count(STAT_CREDITS, 1);
	return 0;
}

SEC("perf_event")
int on_cgroup_switch(void *ctx)
{
	return credit(1, 0, 0);
}

SEC("raw_tp")
int credit_now(void *ctx)
{
	return credit(0, 0, 0);
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
SEC("raw_tp/cgroup_attach_task")
int on_cgroup_attach(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (void *)ctx->args[2];
	int self = (__u64)task == bpf_get_current_task();
	if (!self && ctx->args[3]) /* a whole thread group: is it ours? */
		self = BPF_CORE_READ(task, tgid) == (__u32)(bpf_get_current_pid_tgid() >> 32);
	return credit(0, 0, self);
}

#define PWR_EVENT_EXIT ((__u32)-1) /* cpu_idle's state when the CPU leaves idle */

/* cpu_idle(unsigned int state, unsigned int cpu_id): the idle task is current. */
SEC("raw_tp/cpu_idle")
int on_idle_exit(struct bpf_raw_tracepoint_args *ctx)
{
	if ((__u32)ctx->args[0] != PWR_EVENT_EXIT)
		return 0;
	return credit(0, 1, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
