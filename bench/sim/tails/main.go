// Command tails explains where each arm's slow first tokens come from: it runs
// the sweep's arms in virtual time (the same fleet, picker and seeds as
// bench/vtime/sweep) and splits every arm's requests by the engine that served
// them and by what that engine found for the prompt: a GPU prefix-cache hit, a
// load from the LMCache CPU tier, or a recompute of the prefix. For each class
// it prints the share of requests, their mean TTFT and the share of the arm's
// tail (requests at or above their seed's TTFT p95).
//
//	go run ./bench/sim/tails -seeds 20
//
// It reads no files and writes the table to standard output.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/stats"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tails:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	cfg := experiment.DefaultConfig()
	fs := flag.NewFlagSet("tails", flag.ContinueOnError)
	seeds := fs.Int("seeds", len(cfg.Seeds), "seeds per arm (1..n)")
	arms := fs.String("arms", "all", "arms as sweep's -arms takes them (all: every arm of the sweep)")
	fs.StringVar(&cfg.Protocol, "protocol", cfg.Protocol, "published (cold fleet, published warm-up, seeds back to back) or per-seed (each seed after -warmup requests)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "per-seed protocol: warm-up requests before each measured seed")
	fs.IntVar(&cfg.Workers, "workers", runtime.GOMAXPROCS(0), "runs in parallel")
	cfg.Workload.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *seeds < 1 {
		return fmt.Errorf("-seeds %d: need at least 1", *seeds)
	}
	cfg.Seeds = experiment.SeedRange(1, uint64(*seeds))
	var err error
	if cfg.Arms, err = experiment.ParseArms(*arms); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := vtime.RunSweep(ctx, cfg, nil)
	if err != nil {
		return err
	}
	return write(w, breakdown(res.Runs))
}

// Request classes: what the serving engine found for the prompt at admission.
const (
	classGPU       = "GPU hit"
	classLoad      = "LMCache load"
	classRecompute = "recompute"
)

// recomputeTokens is how many computed prompt tokens make a request count as a
// recompute: more than one LMCache chunk, i.e. more than a suffix.
const recomputeTokens = 256

// class names what the engine found for a request.
func class(r experiment.Row) string {
	switch {
	case r.PromptTokens-r.CachedTokens-r.LoadedTokens > recomputeTokens:
		return classRecompute
	case r.LoadedTokens > 0:
		return classLoad
	}
	return classGPU
}

// cell is one (engine, class) group of an arm's requests.
type cell struct {
	Engine, Class string
	Requests      int
	Tail          int     // requests at or above their seed's TTFT p95
	TTFTSum       float64 // seconds
	Preempted     int     // requests preempted at least once
}

// armTail is one arm's requests split into cells.
type armTail struct {
	Arm      string
	Requests int
	Tail     int
	Cells    []cell // by engine, then class
}

// breakdown splits every arm's finished requests into cells, keeping the
// arms in run order.
func breakdown(runs []experiment.Run) []armTail {
	var out []armTail
	idx := map[string]int{}
	for _, run := range runs {
		i, ok := idx[run.Arm.Name]
		if !ok {
			i = len(out)
			idx[run.Arm.Name] = i
			out = append(out, armTail{Arm: run.Arm.Name})
		}
		var ttfts []float64
		for _, r := range run.Rows {
			if r.Status == "ok" {
				ttfts = append(ttfts, r.TTFT)
			}
		}
		if len(ttfts) == 0 {
			continue
		}
		p95 := stats.Percentile(ttfts, 95)
		a := &out[i]
		for _, r := range run.Rows {
			if r.Status != "ok" {
				continue
			}
			c := a.cell(r.Engine, class(r))
			c.Requests++
			c.TTFTSum += r.TTFT
			a.Requests++
			if r.TTFT >= p95 {
				c.Tail++
				a.Tail++
			}
			if r.Preemptions > 0 {
				c.Preempted++
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Cells, func(x, y cell) int {
			if c := strings.Compare(x.Engine, y.Engine); c != 0 {
				return c
			}
			return strings.Compare(x.Class, y.Class)
		})
	}
	return out
}

func (a *armTail) cell(engine, class string) *cell {
	for i := range a.Cells {
		if a.Cells[i].Engine == engine && a.Cells[i].Class == class {
			return &a.Cells[i]
		}
	}
	a.Cells = append(a.Cells, cell{Engine: engine, Class: class})
	return &a.Cells[len(a.Cells)-1]
}

// write prints one markdown table with a row per arm and cell.
func write(w io.Writer, arms []armTail) error {
	var b strings.Builder
	b.WriteString("| arm | engine | found | share of requests | mean TTFT s | share of the TTFT tail (>= seed p95) | preempted |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, a := range arms {
		for _, c := range a.Cells {
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f%% | %.3f | %.1f%% | %d |\n", a.Arm, c.Engine, c.Class,
				100*float64(c.Requests)/float64(a.Requests), c.TTFTSum/float64(c.Requests),
				100*float64(c.Tail)/float64(max(a.Tail, 1)), c.Preempted)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
