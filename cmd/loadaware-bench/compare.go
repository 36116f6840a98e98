package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
)

func init() {
	register(command{name: "compare", summary: "paired one-sided Wilcoxon of two arms' saved per-seed results, with the median change and a bootstrap CI", run: runCompare})
}

// runCompare is `loadaware-bench compare CANDIDATE BASELINE -metric M`.
func runCompare(_ context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var names []string
	for _, m := range analysis.Metrics {
		names = append(names, analysis.FlagName(m.Name))
	}
	dir := fs.String("dir", "bench-results", "results directory written by sweep or live, or a capture in the published layout (cell directories with run.json, as drive writes and replay -real reads); a capture's arms are its cells' labels (kvaware, loadaware-b1, ...)")
	metric := fs.String("metric", "ttft_p95", "metric: "+strings.Join(names, ", "))
	alpha := fs.Float64("alpha", analysis.Alpha, "significance threshold of the one-sided p-value")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: loadaware-bench compare [flags] CANDIDATE BASELINE\n\nCompares two arms of a results directory seed by seed.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return errFlags
	}
	if len(pos) != 2 {
		return usagef("want two arms, CANDIDATE and BASELINE (e.g. loadaware-b1 kvaware); got %d arguments", len(pos))
	}
	met, ok := analysis.MetricByFlag(*metric)
	if !ok {
		return usagef("unknown metric %q: use one of %s", *metric, strings.Join(names, ", "))
	}
	if capture.IsCapture(*dir) {
		cells, err := capture.Load(*dir)
		if err != nil {
			return err
		}
		c, err := analysis.CompareCells(cells, pos[0], pos[1], met)
		if err != nil {
			return err
		}
		c.WriteText(stdout, *dir, "capture", *alpha)
		return nil
	}
	res, meta, err := experiment.Load(*dir)
	if err != nil {
		return err
	}
	c, err := analysis.CompareArms(res, pos[0], pos[1], met)
	if err != nil {
		return err
	}
	c.WriteText(stdout, *dir, meta.Mode, *alpha)
	return nil
}
