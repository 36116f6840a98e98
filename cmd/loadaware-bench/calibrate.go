package main

import (
	"context"
	"flag"
	"io"

	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/replay"
)

func init() {
	register(command{name: "calibrate", summary: "grid search of the simulator's fitted constants on the replay of measured cells (every arm, one set of constants), TSV", run: runCalibrate})
}

// runCalibrate is `loadaware-bench calibrate`: it replays the measured cells (the embedded
// gen2 sweep or -real DIR) on every point of a grid of the fitted constants and prints the
// points, best first, as TSV (replay.Calibrate, replay.WriteGridTSV).
func runCalibrate(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	real := fs.String("real", "", "directory in the published layout (empty: the embedded gen2 sweep)")
	seeds := fs.Int("seeds", 0, "replay only each cell's first N seeds (0: all)")
	grids := make([]*string, len(replay.FittedConstants))
	for i, c := range replay.FittedConstants {
		grids[i] = fs.String(c.Name, formatFloat(c.Default), c.Usage+": comma-separated values to try")
	}
	showProgress := fs.Bool("progress", true, "show progress on stderr")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	values := make([][]float64, len(grids))
	for i, g := range grids {
		v, err := parseList(*g, "a number", parseFloat)
		if err != nil || len(v) == 0 {
			return usagef("-%s %q: give comma-separated numbers", replay.FittedConstants[i].Name, *g)
		}
		values[i] = v
	}
	data, err := measuredCells(*real, "", *seeds)
	if err != nil {
		return err
	}
	bar := progress.New(stderr, "calibrate", *showProgress)
	pts, err := replay.Calibrate(ctx, data, values, bar.Update)
	bar.Finish()
	if err != nil {
		return err
	}
	replay.WriteGridTSV(stdout, pts)
	return nil
}
