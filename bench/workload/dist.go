package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Dist is a length (tokens) or time (seconds) distribution as
// inference-perf's workload catalog states one: a kind and its min, max,
// mean and standard deviation. Draws are clipped to [Min, Max]. The zero
// Dist is "fixed mean=0".
//
//   - fixed: always Mean.
//   - uniform: uniform on [Min, Max].
//   - normal: normal with Mean and Std.
//   - lognormal: Min plus a lognormal whose own mean is Mean-Min (1 when that
//     is not positive) and standard deviation Std, as inference-perf's
//     generate_distribution shifts it.
//   - exponential: Min plus an exponential of mean Mean-Min (our reading of
//     the reasoning catalog's "exponential", which inference-perf's
//     generate_distribution at the cited commit does not define).
//
// Its text form (String, ParseDist, the flags) is the kind followed by
// key=value pairs: "lognormal min=100 max=10000 mean=1500 std=1200",
// "fixed mean=1".
type Dist struct {
	Kind                string
	Min, Max, Mean, Std float64
}

// The distribution kinds.
const (
	DistFixed       = "fixed"
	DistUniform     = "uniform"
	DistNormal      = "normal"
	DistLognormal   = "lognormal"
	DistExponential = "exponential"
)

var distKinds = []string{DistFixed, DistUniform, DistNormal, DistLognormal, DistExponential}

// Fixed returns the distribution that is always x.
func Fixed(x float64) Dist { return Dist{Kind: DistFixed, Min: x, Max: x, Mean: x} }

// ParseDist reads a distribution's text form. Every key is optional except
// what the kind needs (mean for fixed, normal, lognormal and exponential;
// min and max for uniform); min defaults to 0 and max to +Inf (a bound left
// out does not clip), except for fixed, whose min and max are its mean.
func ParseDist(s string) (Dist, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Dist{}, fmt.Errorf("empty distribution: give a kind (%s) and key=value pairs, e.g. \"lognormal min=100 max=10000 mean=1500 std=1200\"", strings.Join(distKinds, ", "))
	}
	d := Dist{Kind: fields[0], Max: math.Inf(1)}
	known := false
	for _, k := range distKinds {
		known = known || k == d.Kind
	}
	if !known {
		return Dist{}, fmt.Errorf("distribution kind %q: use one of %s", d.Kind, strings.Join(distKinds, ", "))
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Dist{}, fmt.Errorf("distribution %q: %q is not key=value (keys min, max, mean, std)", s, f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return Dist{}, fmt.Errorf("distribution %q: %s=%s: give a finite number", s, k, v)
		}
		if seen[k] {
			return Dist{}, fmt.Errorf("distribution %q: %s given twice", s, k)
		}
		seen[k] = true
		switch k {
		case "min":
			d.Min = x
		case "max":
			d.Max = x
		case "mean":
			d.Mean = x
		case "std":
			d.Std = x
		default:
			return Dist{}, fmt.Errorf("distribution %q: unknown key %q: the keys are min, max, mean, std", s, k)
		}
	}
	switch {
	case d.Kind == DistUniform && !(seen["min"] && seen["max"]):
		return Dist{}, fmt.Errorf("distribution %q: uniform needs min and max", s)
	case d.Kind != DistUniform && !seen["mean"]:
		return Dist{}, fmt.Errorf("distribution %q: %s needs a mean", s, d.Kind)
	case d.Kind == DistFixed:
		if seen["min"] || seen["max"] || seen["std"] {
			return Dist{}, fmt.Errorf("distribution %q: fixed takes only a mean", s)
		}
		d.Min, d.Max = d.Mean, d.Mean
	}
	if err := d.validate(); err != nil {
		return Dist{}, fmt.Errorf("distribution %q: %w", s, err)
	}
	return d, nil
}

func (d Dist) validate() error {
	switch {
	case d.Min < 0:
		return fmt.Errorf("min %g: lengths and times are not negative", d.Min)
	case d.Max < d.Min:
		return fmt.Errorf("max %g is below min %g", d.Max, d.Min)
	case d.Std < 0:
		return fmt.Errorf("std %g: a standard deviation is not negative", d.Std)
	case d.Kind != DistUniform && (d.Mean < d.Min || d.Mean > d.Max):
		return fmt.Errorf("mean %g is outside [min %g, max %g]", d.Mean, d.Min, d.Max)
	}
	return nil
}

// String is the text form ParseDist reads.
func (d Dist) String() string {
	if d.Kind == "" || d.Kind == DistFixed {
		return "fixed mean=" + num(d.Mean)
	}
	s := d.Kind + " min=" + num(d.Min)
	if !math.IsInf(d.Max, 1) {
		s += " max=" + num(d.Max)
	}
	if d.Kind != DistUniform {
		s += " mean=" + num(d.Mean)
	}
	if d.Std != 0 {
		s += " std=" + num(d.Std)
	}
	return s
}

func num(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// Expected is the distribution's stated mean (for uniform, the middle of
// [Min, Max]); clipping may move the mean of the draws off it.
func (d Dist) Expected() float64 {
	if d.Kind == DistUniform {
		return (d.Min + d.Max) / 2
	}
	return d.Mean
}

// Draw returns one value, clipped to [Min, Max].
func (d Dist) Draw(rng *rand.Rand) float64 {
	var x float64
	switch d.Kind {
	case DistUniform:
		x = d.Min + rng.Float64()*(d.Max-d.Min)
	case DistNormal:
		x = d.Mean + d.Std*rng.NormFloat64()
	case DistLognormal:
		m := d.Mean - d.Min
		if m <= 0 {
			m = 1
		}
		s2 := math.Log(1 + (d.Std/m)*(d.Std/m))
		x = d.Min + math.Exp(math.Log(m)-s2/2+math.Sqrt(s2)*rng.NormFloat64())
	case DistExponential:
		x = d.Min + (d.Mean-d.Min)*rng.ExpFloat64()
	default:
		return d.Mean
	}
	return math.Min(math.Max(x, d.Min), d.Max)
}

// DrawInt returns one value rounded to a whole number, as inference-perf
// rounds lengths.
func (d Dist) DrawInt(rng *rand.Rand) int { return int(math.Round(d.Draw(rng))) }

// distFlag makes a *Dist a flag.Value.
type distFlag struct{ d *Dist }

func (f distFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f distFlag) Set(s string) error {
	d, err := ParseDist(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}
