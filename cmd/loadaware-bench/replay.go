package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/replay"
)

func init() {
	register(command{name: "replay", summary: "replay measured cells (the published gen2 sweep, or -real DIR) through the picker on the simulated fleet; real beside simulated", run: runReplay})
}

// runReplay is `loadaware-bench replay [-real DIR] [-json FILE] [-cells a,b]`.
func runReplay(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	real := fs.String("real", "", "directory in the published layout (cell directories with driver-seed*.csv, prom/*.json, run.json, window.env); empty: the embedded published gen2 sweep")
	jsonOut := fs.String("json", "", "also write the whole comparison as JSON to this file")
	cells := fs.String("cells", "", "comma-separated arm labels or cell directory names to replay (default: all)")
	seeds := fs.Int("seeds", 0, "replay only each cell's first N seeds (0: all)")
	baseline := fs.String("baseline", "kvaware", "arm the paired effects are computed against")
	workers := fs.Int("workers", 0, "cells simulated in parallel (0: one per CPU)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: loadaware-bench replay [flags]\n\nReplays each measured cell's protocol (cold fleet, warm-up routed by the cell's policy, seeds back to back\nwith their real prefix sequences and send offsets) through the shipped picker on the simulated fleet and\nprints every metric computed the same way from the real data and from the simulation.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: the directory goes after -real", fs.Arg(0))
	}
	data, err := measuredCells(*real, *cells, *seeds)
	if err != nil {
		return err
	}
	opt := replay.DefaultOptions()
	opt.Baseline, opt.Workers = *baseline, *workers
	bar := progress.New(stderr, "replay", !*quiet)
	opt.Progress = func(done, total int, _ string) { bar.Update(done, total) }
	rep, err := replay.Run(ctx, data, opt)
	bar.Finish()
	if err != nil {
		return err
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := experiment.WriteFile(*jsonOut, rep.WriteJSON); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nEverything above, per seed, as JSON: `%s`.\n", filepath.Base(*jsonOut))
	}
	return nil
}

// measuredCells loads real (a directory in the published layout; "" is the embedded gen2
// sweep), keeps the cells named in cells (comma-separated arm labels or directory names;
// "" keeps all) and each cell's first seeds seeds (0 keeps all). A bad flag is a
// usageError; data that cannot be read another error.
func measuredCells(real, cells string, seeds int) (capture.Compact, error) {
	if seeds < 0 {
		return capture.Compact{}, usagef("-seeds %d: use 0 (all) or a positive count", seeds)
	}
	var data capture.Compact
	var err error
	if real == "" {
		data, err = capture.Embedded()
	} else {
		data, err = capture.BuildCompact(real)
	}
	if err != nil {
		return data, err
	}
	var names []string
	if cells != "" {
		names = strings.Split(cells, ",")
	}
	data, err = data.Select(names, seeds)
	if err != nil {
		return data, usagef("-cells %s %w", cells, err)
	}
	return data, nil
}
