package soak

import (
	"math"
	"testing"
	"time"
)

// ratioInterval brackets the ratio of two windows' p99s: a window against itself scaled by
// k gives an interval around k, and a narrower one the more requests each window has.
func TestRatioInterval(t *testing.T) {
	window := func(n int, scale float64) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d { // a long tail: 1 ms to about 50 ms
			d[i] = time.Duration(scale * float64(time.Millisecond) / (1 - 0.98*float64(i)/float64(n)))
		}
		return d
	}
	var widths []float64
	for _, tc := range []struct {
		n     int
		scale float64
	}{{100, 1}, {400, 3}, {1600, 3}} {
		lo, hi := ratioInterval(window(tc.n, 1), window(tc.n, tc.scale), 0.9, 300)
		if !(lo < tc.scale && tc.scale < hi) {
			t.Errorf("%d requests a window, scaled %v: interval %.2f-%.2f does not hold it", tc.n, tc.scale, lo, hi)
		}
		widths = append(widths, (hi-lo)/tc.scale)
	}
	if !(widths[0] > widths[1] && widths[1] > widths[2]) {
		t.Errorf("relative widths %.3v do not narrow with more requests", widths)
	}
	if lo, hi := ratioInterval(nil, window(10, 1), 0.9, 300); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("an empty window gives %v-%v, want NaN", lo, hi)
	}
}
