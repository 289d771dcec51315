package exporter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/pmu-exporter/pmu_exporter/analysis/locality/samplestat"
	"github.com/pmu-exporter/pmu_exporter/formats/datasrc"
	"github.com/pmu-exporter/pmu_exporter/formats/eventspec"
	"github.com/pmu-exporter/pmu_exporter/formats/perfrecord"
	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
	"github.com/pmu-exporter/pmu_exporter/plan/sampling"
)

// plan is a fixed sampling plan: what the collector would read from a
// sampler (the sampler's syscalls are tested in kernel/perfsample).
type plan []sampling.Config

func (p plan) Configs() []sampling.Config { return p }
func (p plan) Period(i int) uint64        { return p[i].Period * 2 }

func TestSamplingMetrics(t *testing.T) {
	cfgs := plan{{Name: "mem-loads", PMU: "cpu", Period: 1000, Memory: true}, {Name: "ibs_op", PMU: "ibs_op", Period: 4096, Memory: true, AddrOnly: true},
		{Name: "arm_spe", PMU: "arm_spe_0", Period: 4096, Memory: true, Aux: true},
		{Name: "cpu-clock", PMU: "software", Period: 500000, Attr: eventspec.Attr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}}}
	stats := samplestat.New(4, 64)
	hit := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlL3, LvlNum: datasrc.LvlNumL3, Snoop: datasrc.SnoopHITM}.Encode()
	b := stats.Lock()
	for range 3 {
		b.Sample(0, &perfrecord.Sample{Has: unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_DATA_SRC, Addr: 0x1000, TID: 1, Period: 2000, DataSrc: hit, Weight: 100}, true, false)
	}
	b.Sample(1, &perfrecord.Sample{}, true, true)
	b.Lost(0, 4)
	b.Throttled(1)
	b.Error("decode")
	b.AuxFlags(2, perfrecord.AuxTruncated|perfrecord.AuxCollision)
	b.AuxFlags(2, perfrecord.AuxTruncated)
	b.AuxFlags(2, 0)
	b.Filtered(2, 5)
	b.Unlock()
	mfs := gather(t, NewSampling(cfgs, stats))
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	one := func(name string, labels map[string]string) *dto.Metric {
		t.Helper()
		for _, m := range got[name].GetMetric() {
			match := true
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					match = false
				}
			}
			if match {
				return m
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return nil
	}
	loads := map[string]string{"event": "mem-loads"}
	if one("pmu_sampling_samples_total", loads).GetCounter().GetValue() != 3 || one("pmu_sampling_lost_total", loads).GetCounter().GetValue() != 4 ||
		one("pmu_sampling_period", loads).GetGauge().GetValue() != 2000 || one("pmu_sampling_throttled_total", map[string]string{"event": "ibs_op"}).GetCounter().GetValue() != 1 ||
		one("pmu_sampling_filtered_total", map[string]string{"event": "ibs_op"}).GetCounter().GetValue() != 1 {
		t.Errorf("sampling families wrong: %v", got)
	}
	// One unit per family (issue 57): the clock's period in seconds (the
	// plan doubled its 500,000 ns), the counting events' in events.
	clock := map[string]string{"event": "cpu-clock"}
	if one("pmu_sampling_period_seconds", clock).GetGauge().GetValue() != 0.001 || one("pmu_sampling_period_events", loads).GetGauge().GetValue() != 2000 {
		t.Errorf("periods: %v %v", got["pmu_sampling_period_seconds"], got["pmu_sampling_period_events"])
	}
	for _, m := range got["pmu_sampling_period_events"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetValue() == "cpu-clock" {
				t.Errorf("cpu-clock's period in events: %v", m)
			}
		}
	}
	spe := func(reason string) map[string]string { return map[string]string{"event": "arm_spe", "reason": reason} }
	if one("pmu_sampling_aux_lost_total", spe("truncated")).GetCounter().GetValue() != 2 || one("pmu_sampling_aux_lost_total", spe("collision")).GetCounter().GetValue() != 1 ||
		one("pmu_sampling_aux_lost_total", spe("partial")).GetCounter().GetValue() != 0 || len(got["pmu_sampling_aux_lost_total"].GetMetric()) != 3 ||
		one("pmu_sampling_filtered_total", spe("")).GetCounter().GetValue() != 5 || len(got["pmu_sampling_filtered_total"].GetMetric()) != 2 {
		t.Errorf("SPE's AUX losses or filtered records wrong: %v %v", got["pmu_sampling_aux_lost_total"], got["pmu_sampling_filtered_total"])
	}
	if one("pmu_sampling_errors_total", map[string]string{"reason": "decode"}).GetCounter().GetValue() != 1 ||
		one("pmu_sampling_errors_total", map[string]string{"reason": "ring"}).GetCounter().GetValue() != 0 {
		t.Error("sampling errors wrong")
	}
	class := map[string]string{"op": "load", "source": "l3", "snoop": "hitm"}
	if one("pmu_mem_samples_total", class).GetCounter().GetValue() != 3 || one("pmu_mem_accesses_estimated_total", class).GetCounter().GetValue() != 6000 {
		t.Error("memory class counts wrong")
	}
	if n := len(got["pmu_mem_samples_total"].GetMetric()); n != 1 {
		t.Errorf("%d classes exported, only one was sampled", n)
	}
	h := one("pmu_mem_load_latency_cycles", nil).GetHistogram()
	if h.GetSchema() != samplestat.Schema || h.GetSampleCount() != 3 || h.GetSampleSum() != 300 || len(h.GetPositiveSpan()) != 1 {
		t.Errorf("latency histogram %v", h)
	}
	if one("pmu_cacheline_sharing_events_estimated_total", map[string]string{"kind": "false_sharing"}).GetCounter().GetValue() != 0 {
		t.Error("one thread cannot share")
	}
}

// The address sampler's series name its event, cpu-clock, and say whose it
// is (sampler="address"), so that no event label holds a sampler's name;
// its period is not among the sampling periods, being
// pmu_comm_sample_period_seconds (per sampled cgroup), except in the
// deprecated pmu_sampling_period, which keeps its old label for a release.
func TestSamplingAddressSampler(t *testing.T) {
	cfgs := plan{sampling.Decoded(1_000_000, false, 0)}
	stats := samplestat.New(1, 64)
	b := stats.Lock()
	b.Sample(0, &perfrecord.Sample{TID: 1, Period: 1_000_000}, true, false)
	b.Unlock()
	mfs := gather(t, NewSampling(cfgs, stats))
	seen := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			seen[mf.GetName()] = true
			switch mf.GetName() {
			case "pmu_sampling_period":
				if label(m, "event") != "decode" || label(m, "sampler") != "" {
					t.Errorf("deprecated %s: %v, want its old labels (event=decode)", mf.GetName(), m.GetLabel())
				}
			case "pmu_sampling_samples_total", "pmu_sampling_lost_total", "pmu_sampling_throttled_total":
				if label(m, "event") != "cpu-clock" || label(m, "sampler") != sampling.SamplerAddress || label(m, "pmu") != "software" {
					t.Errorf("%s: %v, want sampler=address, event=cpu-clock, pmu=software", mf.GetName(), m.GetLabel())
				}
			}
		}
	}
	for _, name := range []string{"pmu_sampling_samples_total", "pmu_sampling_period"} {
		if !seen[name] {
			t.Errorf("no %s", name)
		}
	}
	for _, name := range []string{"pmu_sampling_period_seconds", "pmu_sampling_period_events"} {
		if seen[name] {
			t.Errorf("%s has the address sampler's period: that is pmu_comm_sample_period_seconds, per sampled cgroup", name)
		}
	}
}

type cgroupTable map[uint64]string

func (c cgroupTable) Cgroup(id uint64) (string, podcgroup.Identity, bool) {
	p, ok := c[id]
	ident, _ := podcgroup.Parse(p)
	return p, ident, ok
}

type podNames struct{}

func (podNames) Names(id podcgroup.Identity) (string, string, string, bool) {
	return "shop", "cart-1", "app", id.PodUID == "0d2c7a6e-1c63-4d38-a8f4-5f2e0a1f3b11"
}

func TestSamplingPerCgroup(t *testing.T) {
	cfgs := plan{{Name: "mem-loads", PMU: "cpu", Period: 1000, Memory: true}}
	stats := samplestat.New(1, 64)
	stats.TrackCgroups(3)
	src := datasrc.DataSrc{Op: datasrc.OpLoad, Lvl: datasrc.LvlHit | datasrc.LvlLocRAM, LvlNum: datasrc.LvlNumRAM}.Encode()
	pod := "/kubepods.slice/kubepods-pod0d2c7a6e_1c63_4d38_a8f4_5f2e0a1f3b11.slice/cri-containerd-4f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9.scope"
	b := stats.Lock()
	for _, id := range []uint64{7, 7, 8, 10, 9} {
		b.Sample(0, &perfrecord.Sample{Has: unix.PERF_SAMPLE_ADDR | unix.PERF_SAMPLE_DATA_SRC | unix.PERF_SAMPLE_CGROUP, Cgroup: id, Addr: 0x40, Period: 1000, DataSrc: src}, true, false)
	}
	b.Unlock()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewSampling(cfgs, stats).PerCgroup(cgroupTable{7: pod, 10: "/x\xffy"}, podNames{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "pmu_cgroup_mem_accesses_estimated_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["cgroup"]+"|"+l["namespace"]+"|"+l["pod"]+"|"+l["container"]+"|"+l["source"]] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{pod + "|shop|cart-1|app|local_dram": 2000, "id:8||||local_dram": 1000, "other||||local_dram": 1000,
		// A cgroup named with bytes that are not UTF-8 does not fail the scrape.
		"/x\uFFFDy||||local_dram": 1000}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// gather is what a registry of c alone gathers.
func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
