package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/replay"
)

func init() {
	register(command{name: "calibrate", summary: "grid search of the simulator's fitted constants on the replay of measured cells (every arm, one set of constants), TSV", run: runCalibrate})
}

// fittedConstant is one of the model's fitted constants and the grid to try.
type fittedConstant struct {
	flag, usage string
	def         string // the grid's default: the kept value alone
	set         func(o *replay.Options, v float64)
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// fittedConstants are the constants docs/bench/simulator.md marks fitted.
var fittedConstants = []fittedConstant{
	{"slowdown", "step-time factor of engine 1 (engine 0 is nominal)", "1.3", func(o *replay.Options, v float64) { o.Fleet.Slowdowns = []float64{1, v} }},
	{"prefill-efficiency", "fraction of peak FLOP/s in the linear layers", "0.25", func(o *replay.Options, v float64) { o.Fleet.Engine.PrefillEfficiency = v }},
	{"step-ms", "fixed host time per step, ms", "6", func(o *replay.Options, v float64) { o.Fleet.Engine.StepOverhead = msDur(v) }},
	{"seq-ms", "host time per sequence per step, ms", "0.5", func(o *replay.Options, v float64) { o.Fleet.Engine.SeqOverhead = msDur(v) }},
	{"admit-ms", "cost per admitted request, ms", "25", func(o *replay.Options, v float64) { o.Fleet.Engine.AdmitOverhead = msDur(v) }},
	{"admit-seq-ms", "cost per admitted request per sequence in the step, ms", "0.15", func(o *replay.Options, v float64) { o.Fleet.Engine.AdmitSeqCost = msDur(v) }},
	{"output-ms", "API server time per streamed token, ms", "0.31", func(o *replay.Options, v float64) { o.Fleet.Engine.OutputCost = msDur(v) }},
}

// runCalibrate is `loadaware-bench calibrate`: it replays the measured cells (the embedded
// gen2 sweep or -real DIR) on every point of a grid of the fitted constants and prints the
// points, best first, as TSV: replay.Report.Score's loss, its counts, and the constants.
func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	real := fs.String("real", "", "directory in the published layout (empty: the embedded gen2 sweep)")
	seeds := fs.Int("seeds", 0, "replay only each cell's first N seeds (0: all)")
	grids := make([]*string, len(fittedConstants))
	for i, c := range fittedConstants {
		grids[i] = fs.String(c.flag, c.def, c.usage+": comma-separated values to try")
	}
	progress := fs.Bool("progress", true, "show progress on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	values := make([][]float64, len(fittedConstants))
	points := 1
	for i, g := range grids {
		v, err := parseFloats(*g)
		if err != nil || len(v) == 0 {
			fmt.Fprintf(stderr, "loadaware-bench calibrate: -%s %q: give comma-separated numbers\n", fittedConstants[i].flag, *g)
			return 2
		}
		values[i] = v
		points *= len(v)
	}
	data, code, err := measuredCells(*real, "", *seeds)
	if err != nil {
		fmt.Fprintf(stderr, "loadaware-bench calibrate: %v\n", err)
		return code
	}
	type point struct {
		vals  []float64
		score replay.Score
	}
	pts := make([]point, 0, points)
	bar := newProgressBar(stderr, "calibrate", *progress)
	idx := make([]int, len(values))
	for n := 0; n < points; n++ {
		opt := replay.DefaultOptions()
		p := point{vals: make([]float64, len(values))}
		for i, c := range fittedConstants {
			p.vals[i] = values[i][idx[i]]
			c.set(&opt, p.vals[i])
		}
		rep, err := replay.Run(ctx, data, opt)
		if err != nil {
			bar.finish()
			fmt.Fprintf(stderr, "loadaware-bench calibrate: %v\n", err)
			return 1
		}
		p.score = rep.Score()
		pts = append(pts, p)
		bar.update(n+1, points)
		for i := range idx { // next grid point, odometer order
			if idx[i]++; idx[i] < len(values[i]) {
				break
			}
			idx[i] = 0
		}
	}
	bar.finish()
	slices.SortStableFunc(pts, func(x, y point) int {
		switch {
		case x.score.Loss < y.score.Loss:
			return -1
		case x.score.Loss > y.score.Loss:
			return 1
		}
		return 0
	})
	cols := []string{"loss", "failed", "discordant", "effect_mismatch"}
	for _, c := range fittedConstants {
		cols = append(cols, strings.ReplaceAll(c.flag, "-", "_"))
	}
	fmt.Fprintln(stdout, strings.Join(cols, "\t"))
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, p := range pts {
		row := []string{f(p.score.Loss), strconv.Itoa(p.score.Failed), strconv.Itoa(p.score.Discordant), strconv.Itoa(p.score.EffectMismatch)}
		for _, v := range p.vals {
			row = append(row, f(v))
		}
		fmt.Fprintln(stdout, strings.Join(row, "\t"))
	}
	return 0
}
