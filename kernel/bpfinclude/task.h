/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel's structs as far as the programs at context switches read them
 * (kernel/cgroupbpf, kernel/schedbpf), and the cgroup a task is counted in.
 * CO-RE relocates each field the programs use to the running kernel's BTF;
 * a field a program does not read costs it nothing.
 */
#ifndef PMU_EXPORTER_TASK_H
#define PMU_EXPORTER_TASK_H

#include <linux/types.h>
#include <bpf/bpf_core_read.h>

struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));
struct cgroup {
	struct kernfs_node *kn;
	int level;
	struct cgroup *ancestors[]; /* Linux 6.1+: older kernels fail a load that reads it */
} __attribute__((preserve_access_index));
struct cgroup_subsys_state {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));
struct css_set {
	struct cgroup_subsys_state *subsys[1];
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));
struct rq {
	__u64 clock;
} __attribute__((preserve_access_index));
struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));
struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));
struct sched_info {
	unsigned long long run_delay;
	unsigned long long last_arrival;
} __attribute__((preserve_access_index));
struct task_struct {
	struct css_set *cgroups;
	int pid;
	int tgid;
	__u64 start_time;
	struct sched_entity se;
	struct sched_info sched_info;
} __attribute__((preserve_access_index));
enum cgroup_subsys_id {
	perf_event_cgrp_id = 0, /* relocated to the kernel's value */
};

/* task_cgroup is the cgroup whose change makes a cgroup switch: the task's
 * cgroup v2, or (v1) its cgroup in v1's perf_event hierarchy. task is a BTF
 * pointer (a tp_btf argument): plain loads. */
static __always_inline struct cgroup *task_cgroup(struct task_struct *task, int v1)
{
	if (v1) {
		int subsys = bpf_core_enum_value(enum cgroup_subsys_id, perf_event_cgrp_id);
		if (subsys < 0 || subsys >= 64)
			return 0;
		return task->cgroups->subsys[subsys]->cgroup;
	}
	return task->cgroups->dfl_cgrp;
}

#endif
