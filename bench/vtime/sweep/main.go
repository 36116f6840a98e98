// Command sweep runs the benchmark sweep in virtual time and writes the
// report (per-request CSVs, per-seed metrics, figures, REPORT.md):
//
//	go run ./bench/vtime/sweep -out docs/bench
//
// Every workload parameter is a flag; the defaults are the published sweep
// (7 arms x 20 seeds x 500 requests on 2 engines).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sweep:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := vtime.DefaultSweepConfig()
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	out := fs.String("out", "bench-report", "directory for REPORT.md, CSVs and figures")
	seeds := fs.Int("seeds", len(cfg.Seeds), "seeds per arm (1..n)")
	csvs := fs.Bool("csv", true, "write the per-request CSV of every run (about 200 kB each)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up requests before each measured seed")
	fs.IntVar(&cfg.Workers, "workers", runtime.GOMAXPROCS(0), "runs in parallel")
	cfg.Workload.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *seeds < 1 {
		return fmt.Errorf("-seeds %d: need at least 1", *seeds)
	}
	cfg.Seeds = make([]uint64, *seeds)
	for i := range cfg.Seeds {
		cfg.Seeds[i] = uint64(i + 1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	res, err := vtime.RunSweep(ctx, cfg, func(done, total int) {
		fmt.Fprintf(os.Stderr, "\r%d/%d runs", done, total)
	})
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	wall := time.Since(start)
	cmd := "go run ./bench/vtime/sweep " + strings.Join(args, " ")
	a, err := analysis.WriteReport(*out, res, analysis.ReportOptions{Command: strings.TrimSpace(cmd), WallTime: wall, Workers: cfg.Workers, NoCSVs: !*csvs})
	if err != nil {
		return err
	}
	fmt.Printf("%d runs in %.1f s; calibration reproduced: %v; report: %s/REPORT.md\n", len(res.Runs), wall.Seconds(), a.Reproduced, *out)
	return nil
}
