#!/bin/sh
# Records examples/replay/falseshare.data, the timer samples with user
# registers that `pmu_exporter comm` and --replay.samples decode (no
# precise PMU needed): falseshare.c's two threads, one second, in the
# cgroup /pmu-example, every 2 ms of their CPU time, with perf record
# --all-cgroups. The binary is kept under examples/replay/symfs, where
# --replay.symfs (perf script --symfs) finds the sampled code.
# Run as root from the repository root: sh internal/examplegen/falseshare/record.sh
set -eu
out=examples/replay
gcc -O1 -g0 -s -pthread -o /tmp/falseshare internal/examplegen/falseshare/falseshare.c
cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts) # /sys/fs/cgroup, or .../unified on a hybrid host
mkdir -p /opt/pmu-example "$out/symfs/opt/pmu-example" "$cg2/pmu-example"
cp /tmp/falseshare /opt/pmu-example/falseshare
cp /tmp/falseshare "$out/symfs/opt/pmu-example/falseshare"
perf record -o "$out/falseshare.data" -e cpu-clock:u -c 2000000 --all-cgroups \
	--user-regs=ax,bx,cx,dx,si,di,bp,sp,ip,flags,cs,ss,r8,r9,r10,r11,r12,r13,r14,r15 \
	-- sh -c "echo \$\$ > $cg2/pmu-example/cgroup.procs && exec /opt/pmu-example/falseshare 1"
rmdir "$cg2/pmu-example"
rm /opt/pmu-example/falseshare
rm -f "$out/falseshare.data.old" # perf record keeps the previous file so
