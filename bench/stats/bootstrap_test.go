package stats

import (
	"testing"

	"github.com/loadaware/loadaware-epp/bench/internal/errcheck"
)

func TestBootstrapCI(t *testing.T) {
	xs := []float64{0.12, 0.05, 0.33, 0.21, -0.08, 0.4, 0.17, 0.09, -0.22, 0.31}
	a, err := BootstrapCI(xs, Median, 0.95, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := BootstrapCI(xs, Median, 0.95, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same seed gave %+v and %+v", a, b)
	}
	c, err := BootstrapCI(xs, Median, 0.95, 2000, 8)
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Errorf("different seeds gave the same interval %+v", a)
	}
	m := Median(xs)
	if !(a.Lo <= m && m <= a.Hi) || a.Lo >= a.Hi {
		t.Errorf("interval %+v does not bracket the median %v", a, m)
	}
	narrow, err := BootstrapCI(xs, Median, 0.5, 2000, 7)
	if err != nil {
		t.Fatal(err)
	}
	if narrow.Hi-narrow.Lo >= a.Hi-a.Lo {
		t.Errorf("50%% interval %+v is not narrower than 95%% %+v", narrow, a)
	}
	constant, err := BootstrapCI([]float64{3, 3, 3}, Median, 0.95, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if constant.Lo != 3 || constant.Hi != 3 {
		t.Errorf("constant sample interval = %+v, want [3,3]", constant)
	}
}

// BootstrapCI refuses what it cannot resample, and its error names the input at fault.
func TestBootstrapCIRejectsBadInput(t *testing.T) {
	tests := []struct {
		name, want string
		xs         []float64
		level      float64
		resamples  int
	}{
		{"empty", ErrEmpty.Error(), nil, 0.95, 1000},
		{"level 1", "confidence level 1 outside (0, 1)", []float64{1}, 1, 1000},
		{"level 0", "confidence level 0 outside (0, 1)", []float64{1}, 0, 1000},
		{"too few resamples", "10 bootstrap resamples are too few", []float64{1}, 0.95, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BootstrapCI(tt.xs, Median, tt.level, tt.resamples, 1)
			errcheck.Done(t, err, tt.want)
		})
	}
}
