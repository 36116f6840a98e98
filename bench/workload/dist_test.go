package workload

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseDist(t *testing.T) {
	cases := []struct {
		in   string
		want Dist
		err  string
	}{
		{in: "lognormal min=100 max=10000 mean=1500 std=1200", want: Dist{Kind: DistLognormal, Min: 100, Max: 10000, Mean: 1500, Std: 1200}},
		{in: "fixed mean=1", want: Fixed(1)},
		{in: "uniform min=1 max=3", want: Dist{Kind: DistUniform, Min: 1, Max: 3}},
		{in: "exponential min=500 max=32000 mean=8000", want: Dist{Kind: DistExponential, Min: 500, Max: 32000, Mean: 8000}},
		{in: "normal mean=5 std=2", want: Dist{Kind: DistNormal, Max: math.Inf(1), Mean: 5, Std: 2}},
		{in: "", err: "empty distribution"},
		{in: "gamma mean=1", err: `kind "gamma"`},
		{in: "fixed 1", err: "not key=value"},
		{in: "fixed mean=x", err: "finite number"},
		{in: "fixed mean=NaN", err: "finite number"},
		{in: "fixed mean=1 mean=2", err: "given twice"},
		{in: "fixed mean=1 median=2", err: `unknown key "median"`},
		{in: "uniform min=1", err: "uniform needs min and max"},
		{in: "lognormal min=1 max=2", err: "needs a mean"},
		{in: "fixed mean=1 std=2", err: "fixed takes only a mean"},
		{in: "uniform min=3 max=1", err: "below min"},
		{in: "normal min=-1 mean=1", err: "not negative"},
		{in: "normal mean=1 std=-1", err: "not negative"},
		{in: "lognormal min=10 max=20 mean=30", err: "outside"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseDist(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
			back, err := ParseDist(got.String())
			if err != nil || back != got {
				t.Fatalf("%q read back as %+v, %v", got.String(), back, err)
			}
		})
	}
}

// Draws stay in [min, max] and, where clipping is rare, average the stated
// mean (for lognormal, inference-perf's shift by min included).
func TestDistDraw(t *testing.T) {
	cases := []struct {
		d        Dist
		wantMean float64
	}{
		{Fixed(7), 7},
		{Dist{Kind: DistUniform, Min: 2, Max: 4}, 3},
		{Dist{Kind: DistNormal, Min: 0, Max: 1000, Mean: 500, Std: 50}, 500},
		{Dist{Kind: DistLognormal, Min: 100, Max: 1e9, Mean: 1500, Std: 1200}, 1500},
		{Dist{Kind: DistExponential, Min: 500, Max: 1e9, Mean: 8000}, 8000},
	}
	for _, c := range cases {
		t.Run(c.d.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var sum float64
			const n = 40000
			for range n {
				x := c.d.Draw(rng)
				if x < c.d.Min || x > c.d.Max {
					t.Fatalf("drew %g outside [%g, %g]", x, c.d.Min, c.d.Max)
				}
				sum += x
			}
			if m := sum / n; math.Abs(m-c.wantMean) > 0.03*c.wantMean {
				t.Fatalf("mean of %d draws %g, want %g within 3%%", n, m, c.wantMean)
			}
		})
	}
	clipped := Dist{Kind: DistLognormal, Min: 1, Max: 100, Mean: 15, Std: 55}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		if x := clipped.Draw(rng); x < 1 || x > 100 {
			t.Fatalf("clipped lognormal drew %g", x)
		}
	}
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"lognormal min=100 max=10000 mean=1500 std=1200", "fixed mean=1", "uniform min=1 max=3", "exponential min=1 mean=2", "normal mean=1 std=1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDist(s)
		if err != nil {
			return
		}
		if err := d.validate(); err != nil {
			t.Fatalf("%q parsed to %+v, which does not validate: %v", s, d, err)
		}
		back, err := ParseDist(d.String())
		if err != nil || back != d {
			t.Fatalf("%q: %+v prints as %q, read back as %+v, %v", s, d, d.String(), back, err)
		}
		x := d.Draw(rand.New(rand.NewPCG(1, 1)))
		if x < d.Min || x > d.Max {
			t.Fatalf("%q drew %g", s, x)
		}
	})
}
