package replay

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
)

// Constant is one of the simulator's fitted constants (docs/bench/simulator.md) as a
// calibration grid varies it.
type Constant struct {
	Name, Usage string                          // a flag-style name and what it is
	Default     float64                         // the value the model keeps
	Set         func(o *Options, value float64) // puts a value into the replay's options
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// FittedConstants are the constants docs/bench/simulator.md marks fitted.
var FittedConstants = []Constant{
	{"slowdown", "step-time factor of engine 1 (engine 0 is nominal)", 1.3, func(o *Options, v float64) { o.Fleet.Slowdowns = []float64{1, v} }},
	{"prefill-efficiency", "fraction of peak FLOP/s in the linear layers", 0.25, func(o *Options, v float64) { o.Fleet.Engine.PrefillEfficiency = v }},
	{"step-ms", "fixed host time per step, ms", 6, func(o *Options, v float64) { o.Fleet.Engine.StepOverhead = msDur(v) }},
	{"seq-ms", "host time per sequence per step, ms", 0.5, func(o *Options, v float64) { o.Fleet.Engine.SeqOverhead = msDur(v) }},
	{"admit-ms", "cost per admitted request, ms", 25, func(o *Options, v float64) { o.Fleet.Engine.AdmitOverhead = msDur(v) }},
	{"admit-seq-ms", "cost per admitted request per sequence in the step, ms", 0.15, func(o *Options, v float64) { o.Fleet.Engine.AdmitSeqCost = msDur(v) }},
	{"output-ms", "API server time per streamed token, ms", 0.31, func(o *Options, v float64) { o.Fleet.Engine.OutputCost = msDur(v) }},
}

// GridPoint is one point of a calibration grid and its replay's score.
type GridPoint struct {
	Values []float64 // one per FittedConstants entry
	Score  Score
}

// Calibrate replays data (with DefaultOptions) on every point of the grid values[i] x ...
// (values[i] are the values of FittedConstants[i] to try) and returns the points, lowest
// Score.Loss first (ties in grid order). progress, if not nil, is called after each point.
func Calibrate(ctx context.Context, data capture.Compact, values [][]float64, progress func(done, total int)) ([]GridPoint, error) {
	if len(values) != len(FittedConstants) {
		return nil, fmt.Errorf("replay: %d value lists for %d fitted constants: give one list per constant", len(values), len(FittedConstants))
	}
	points := 1
	for i, v := range values {
		if len(v) == 0 {
			return nil, fmt.Errorf("replay: no values for %s: give at least one", FittedConstants[i].Name)
		}
		points *= len(v)
	}
	pts := make([]GridPoint, 0, points)
	idx := make([]int, len(values))
	for n := range points {
		opt := DefaultOptions()
		p := GridPoint{Values: make([]float64, len(values))}
		for i, c := range FittedConstants {
			p.Values[i] = values[i][idx[i]]
			c.Set(&opt, p.Values[i])
		}
		rep, err := Run(ctx, data, opt)
		if err != nil {
			return nil, err
		}
		p.Score = rep.Score()
		pts = append(pts, p)
		if progress != nil {
			progress(n+1, points)
		}
		for i := range idx { // next grid point, odometer order
			if idx[i]++; idx[i] < len(values[i]) {
				break
			}
			idx[i] = 0
		}
	}
	slices.SortStableFunc(pts, func(x, y GridPoint) int { return cmp.Compare(x.Score.Loss, y.Score.Loss) })
	return pts, nil
}

// WriteGridTSV writes points as TSV: the loss, its counts, then each constant's value.
func WriteGridTSV(w io.Writer, points []GridPoint) {
	cols := []string{"loss", "failed", "discordant", "effect_mismatch"}
	for _, c := range FittedConstants {
		cols = append(cols, strings.ReplaceAll(c.Name, "-", "_"))
	}
	fmt.Fprintln(w, strings.Join(cols, "\t"))
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, p := range points {
		row := []string{f(p.Score.Loss), strconv.Itoa(p.Score.Failed), strconv.Itoa(p.Score.Discordant), strconv.Itoa(p.Score.EffectMismatch)}
		for _, v := range p.Values {
			row = append(row, f(v))
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
}
