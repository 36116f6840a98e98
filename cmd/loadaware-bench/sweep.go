package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/picker"
)

func init() {
	register(command{name: "sweep", summary: "arms x seeds in virtual time through the real picker: REPORT.md, figures, CSVs, saved results", run: runSweep})
}

// runSweep is `loadaware-bench sweep`: the published sweep (7 arms x 20 seeds x 500
// requests) by default, every parameter a flag.
func runSweep(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	cfg := experiment.DefaultConfig()
	var sf sweepFlags
	sf.register(fs, &cfg, "all", "1-20", routerPublished, "bench-results")
	fs.IntVar(&cfg.Workers, "workers", runtime.GOMAXPROCS(0), "runs in parallel (results do not depend on it)")
	save := fs.Bool("save", true, "save every run in "+experiment.FileName+" (about 5 MB for the full sweep) for compare and report")
	fs.StringVar(&cfg.CacheSource, "cache-source", picker.SourceLMCache, "what the picker learns the engines' caches from: lmcache, vllm-events (the CPU tiers published as vLLM KV events) or both")
	alsoEnvoy := fs.Bool("also-envoy", false, "then run the same sweep behind Envoy and this picker (-router envoy) and add its tables to REPORT.md")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	if err := sf.apply(&cfg); err != nil {
		return usageError{err}
	}
	bar := progress.New(stderr, "sweep", sf.progress)
	start := time.Now()
	res, err := vtime.RunSweep(ctx, cfg, bar.Update)
	bar.Finish()
	if err != nil {
		return err
	}
	wall := time.Since(start)
	a, err := analysis.WriteAll(sf.out, res, experiment.Meta{Mode: experiment.ModeVirtual, Command: strings.TrimSpace("loadaware-bench sweep " + strings.Join(args, " ")),
		Wall: wall, Workers: cfg.Workers, NoCSVs: !sf.csvs}, *save)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d runs (%d arms x %d seeds x %d requests; %s) in %.1f s with %d workers; calibration reproduced: %v\nreport: %s\n",
		len(res.Runs), len(cfg.Arms), len(cfg.Seeds), cfg.Workload.Requests, cfg.ProtocolText(), wall.Seconds(), cfg.Workers, a.Reproduced, reportPath(sf.out))
	if *alsoEnvoy {
		ecfg := cfg
		ecfg.Router = experiment.EnvoyRouter()
		bar := progress.New(stderr, "sweep behind Envoy", sf.progress)
		eres, err := vtime.RunSweep(ctx, ecfg, bar.Update)
		bar.Finish()
		if err == nil {
			err = analysis.AppendEnvoySection(reportPath(sf.out), eres)
		}
		if err != nil {
			return fmt.Errorf("behind Envoy: %v", err)
		}
		fmt.Fprintf(stdout, "the same sweep behind Envoy and this picker: added to %s\n", reportPath(sf.out))
	}
	return nil
}

func reportPath(dir string) string { return strings.TrimSuffix(dir, "/") + "/REPORT.md" }
