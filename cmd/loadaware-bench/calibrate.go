package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

func init() {
	register(command{name: "calibrate", summary: "fit the simulator's free constants on the kvaware and roundrobin rows (grid search, TSV)", run: runCalibrate})
}

// calibrationTargets are the fitted quantities and the scale of a miss on each: the spec's
// tolerance where it gives one, 25% otherwise. The loadaware rows are never looked at: they
// stay predictions.
var calibrationTargets = []struct {
	arm, metric string
	scale       float64
}{
	{"kvaware", "TTFT p50", 0.25}, {"kvaware", "TTFT p95", 0.25}, {"kvaware", "req/s", 0.25}, {"kvaware", "imbalance", 0.20},
	{"roundrobin", "TTFT p50", 0.25}, {"roundrobin", "TTFT p95", 0.25}, {"roundrobin", "req/s", 0.25}, {"roundrobin", "imbalance", 0.20},
}

// gridPoint is one combination of the free constants and its loss.
type gridPoint struct {
	slowdown, eff, stepMs, seqMs, ingressMs float64
	loss                                    float64
	got                                     map[string]float64
}

// runCalibrate is `loadaware-bench calibrate`: it runs kvaware and roundrobin on every point
// of a grid of the free constants and prints the points, best first, as TSV on stdout. The
// loss is the sum over both rows of (log(simulated/published)/scale)^2.
func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := vtime.DefaultSweepConfig()
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seeds := fs.Int("seeds", 6, "seeds per grid point (1..n)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up requests per seed")
	slow := fs.String("slowdown", "1.2,1.3,1.4,1.5", "step-time factor of engine 0 (engine 1 is nominal)")
	eff := fs.String("prefill-efficiency", "0.3,0.35,0.4", "fraction of peak FLOP/s in prefill")
	step := fs.String("step-ms", "5,10,15", "fixed step overhead, ms")
	seq := fs.String("seq-ms", "0.8,0.9,1.0,1.1", "per-sequence step overhead, ms")
	ing := fs.String("ingress-ms", "20,40", "client-to-engine-queue latency, ms")
	progress := fs.Bool("progress", true, "show progress on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *seeds < 1 {
		fmt.Fprintf(stderr, "loadaware-bench calibrate: -seeds %d: need at least 1\n", *seeds)
		return 2
	}
	grids := make([][]float64, 5)
	for i, s := range []string{*slow, *eff, *step, *seq, *ing} {
		g, err := parseFloats(s)
		if err != nil || len(g) == 0 {
			fmt.Fprintf(stderr, "loadaware-bench calibrate: grid %q: give comma-separated numbers\n", s)
			return 2
		}
		grids[i] = g
	}
	var pts []gridPoint
	for _, a := range grids[0] {
		for _, b := range grids[1] {
			for _, c := range grids[2] {
				for _, d := range grids[3] {
					for _, e := range grids[4] {
						pts = append(pts, gridPoint{slowdown: a, eff: b, stepMs: c, seqMs: d, ingressMs: e})
					}
				}
			}
		}
	}
	cfg.Arms = []vtime.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "roundrobin", Policy: "roundrobin"}}
	cfg.Seeds = make([]uint64, *seeds)
	for i := range cfg.Seeds {
		cfg.Seeds[i] = uint64(i + 1)
	}
	bar := newProgressBar(stderr, "calibrate", *progress)
	for i := range pts {
		if err := evaluatePoint(ctx, cfg, &pts[i]); err != nil {
			bar.finish()
			fmt.Fprintf(stderr, "loadaware-bench calibrate: %v\n", err)
			return 1
		}
		bar.update(i+1, len(pts))
	}
	bar.finish()
	slices.SortStableFunc(pts, func(x, y gridPoint) int {
		switch {
		case x.loss < y.loss:
			return -1
		case x.loss > y.loss:
			return 1
		}
		return 0
	})
	cols := []string{"loss", "slowdown", "prefill_eff", "step_ms", "seq_ms", "ingress_ms"}
	for _, t := range calibrationTargets {
		cols = append(cols, t.arm+" "+t.metric)
	}
	fmt.Fprintln(stdout, strings.Join(cols, "\t"))
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, p := range pts {
		vals := []string{f(p.loss), f(p.slowdown), f(p.eff), f(p.stepMs), f(p.seqMs), f(p.ingressMs)}
		for _, t := range calibrationTargets {
			vals = append(vals, f(p.got[t.arm+" "+t.metric]))
		}
		fmt.Fprintln(stdout, strings.Join(vals, "\t"))
	}
	return 0
}

func evaluatePoint(ctx context.Context, cfg vtime.SweepConfig, p *gridPoint) error {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	cfg.Slowdowns = []float64{p.slowdown, 1}
	cfg.Engine.PrefillEfficiency = p.eff
	cfg.Engine.StepOverhead = ms(p.stepMs)
	cfg.Engine.SeqOverhead = ms(p.seqMs)
	cfg.Engine.IngressLatency = ms(p.ingressMs)
	res, err := vtime.RunSweep(ctx, cfg, nil)
	if err != nil {
		return err
	}
	a, err := analysis.Analyze(res)
	if err != nil {
		return err
	}
	p.got = map[string]float64{}
	for _, t := range calibrationTargets {
		s, _ := a.Arm(t.arm)
		pub, _ := analysis.PublishedFor(t.arm)
		got := s.Median[t.metric]
		want := map[string]float64{"TTFT p50": pub.TTFTP50, "TTFT p95": pub.TTFTP95, "req/s": pub.ReqPerSec, "imbalance": pub.Imb}[t.metric]
		p.got[t.arm+" "+t.metric] = got
		d := math.Log(got/want) / t.scale
		p.loss += d * d
	}
	return nil
}
