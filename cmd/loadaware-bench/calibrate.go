package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/loadaware/loadaware-epp/bench/replay"
)

func init() {
	register(command{name: "calibrate", summary: "grid search of the simulator's fitted constants on the replay of measured cells (every arm, one set of constants), TSV", run: runCalibrate})
}

// runCalibrate is `loadaware-bench calibrate`: it replays the measured cells (the embedded
// gen2 sweep or -real DIR) on every point of a grid of the fitted constants and prints the
// points, best first, as TSV (replay.Calibrate, replay.WriteGridTSV).
func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	real := fs.String("real", "", "directory in the published layout (empty: the embedded gen2 sweep)")
	seeds := fs.Int("seeds", 0, "replay only each cell's first N seeds (0: all)")
	grids := make([]*string, len(replay.FittedConstants))
	for i, c := range replay.FittedConstants {
		grids[i] = fs.String(c.Name, strconv.FormatFloat(c.Default, 'g', -1, 64), c.Usage+": comma-separated values to try")
	}
	progress := fs.Bool("progress", true, "show progress on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	values := make([][]float64, len(grids))
	for i, g := range grids {
		v, err := parseFloats(*g)
		if err != nil || len(v) == 0 {
			fmt.Fprintf(stderr, "loadaware-bench calibrate: -%s %q: give comma-separated numbers\n", replay.FittedConstants[i].Name, *g)
			return 2
		}
		values[i] = v
	}
	data, code, err := measuredCells(*real, "", *seeds)
	if err != nil {
		fmt.Fprintf(stderr, "loadaware-bench calibrate: %v\n", err)
		return code
	}
	bar := newProgressBar(stderr, "calibrate", *progress)
	pts, err := replay.Calibrate(ctx, data, values, bar.update)
	bar.finish()
	if err != nil {
		fmt.Fprintf(stderr, "loadaware-bench calibrate: %v\n", err)
		return 1
	}
	replay.WriteGridTSV(stdout, pts)
	return 0
}
