package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/experiment"
)

func init() {
	register(command{name: "report", summary: "regenerate REPORT.md, figures and CSVs of a results directory from its saved runs", run: runReport})
}

// runReport is `loadaware-bench report DIR`.
func runReport(_ context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: loadaware-bench report DIR\n\nRewrites DIR/REPORT.md, DIR/figures, DIR/seeds.csv and the per-request CSVs from DIR/%s (written by sweep or live).\n", experiment.FileName)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return errFlags
	}
	if len(pos) != 1 {
		fs.Usage()
		return errFlags
	}
	res, meta, err := experiment.Load(pos[0])
	if err != nil {
		return err
	}
	a, err := analysis.WriteAll(pos[0], res, meta, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d runs (%s); calibration reproduced: %v\nreport: %s\n", len(res.Runs), meta.Mode, a.Reproduced, reportPath(pos[0]))
	return nil
}
