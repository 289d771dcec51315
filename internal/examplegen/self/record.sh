#!/bin/sh
# Records examples/replay/vm-self.prom, what --replay.self serves: two
# scrapes, 20 s apart, of this host's exporter at its defaults (the cgroup
# attribution's eBPF programs running; kernel.bpf_stats_enabled on for the
# run, then as it was), its own eBPF families only, each scrape after a
# "# scraped at UNIX_SECONDS" line. Run as root from the repository root.
set -eu
bin=$(mktemp -d)/pmu_exporter
go build -o "$bin" ./cmd/pmu_exporter
old=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
"$bin" --web.listen-address=127.0.0.1:19893 >/dev/null 2>&1 &
pid=$!
trap 'kill $pid; sysctl -qw kernel.bpf_stats_enabled=$old' EXIT
sleep 5
{
	echo "# Recorded by internal/examplegen/self/record.sh on $(uname -r), $(nproc) CPUs, $(date -u +%Y-%m-%d)."
	for i in 1 2; do
		echo "# scraped at $(date +%s.%N)"
		curl -sf 127.0.0.1:19893/metrics | grep -E '^(# (HELP|TYPE) )?pmu_(self_bpf_[a-z_]+|cgroup_switches_missed_total)[ {]'
		[ "$i" = 2 ] || sleep 20
	done
} >examples/replay/vm-self.prom
