package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pmu-exporter/pmu_exporter/analysis/validate"
	"github.com/pmu-exporter/pmu_exporter/analysis/validate/sampler"
)

// The samplers' verdicts as series: each measured figure's value and
// whether it passed (labelled with its period where it has one), none
// for a figure not measured, and each sampler validated only where all it
// measured passed: the timer, with one failed figure, reads 0.
func TestSamplerValidationSeries(t *testing.T) {
	rows := []sampler.Row{
		{Sampler: "page-faults", Figure: sampler.Accuracy, Period: 17, Value: 1, Verdict: validate.Pass},
		{Sampler: "page-faults", Figure: sampler.Attribution, Value: 1, Verdict: validate.Pass},
		{Sampler: "page-faults", Figure: sampler.Bias, Period: 17, Verdict: validate.NotMeasurable},
		{Sampler: "timer", Figure: sampler.Accuracy, Period: 1000000, Value: 0.5, Verdict: validate.Fail},
		{Sampler: "timer", Figure: sampler.Address, Value: 0.98, Verdict: validate.Pass},
		{Sampler: "spe", Figure: sampler.Accuracy, Verdict: validate.NotMeasurable, Reason: "no arm_spe PMU"},
	}
	c := NewValidation(func() []validate.Result { return nil }).WithSamplers(func() []sampler.Row { return rows })
	want := `
# HELP pmu_sampler_validated 1 if every figure of the sampler that could be measured kept its bound, 0 if one did not: the false-sharing, data-source and reuse figures that rest on a sampler at 0 are not to be trusted.
# TYPE pmu_sampler_validated gauge
pmu_sampler_validated{sampler="page-faults"} 1
pmu_sampler_validated{sampler="timer"} 0
# HELP pmu_sampler_validation_passed 1 if the sampler's figure kept its bound, 0 if not; absent where it could not be measured.
# TYPE pmu_sampler_validation_passed gauge
pmu_sampler_validation_passed{figure="accuracy",period="1000000",sampler="timer"} 0
pmu_sampler_validation_passed{figure="accuracy",period="17",sampler="page-faults"} 1
pmu_sampler_validation_passed{figure="address",period="",sampler="timer"} 1
pmu_sampler_validation_passed{figure="attribution",period="",sampler="page-faults"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pmu_sampler_validated", "pmu_sampler_validation_passed"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "pmu_sampler_validation_ratio"); n != 4 {
		t.Errorf("%d ratio series, want the 4 measured figures", n)
	}
}
