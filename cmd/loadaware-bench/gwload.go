package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/gwload"
)

func init() {
	register(command{name: "gwload", summary: "measure the rate the gateway + picker sustain with p99 added latency under a limit", run: runGWLoad})
}

func runGWLoad(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var c gwload.Config
	rates := fs.String("rates", "250,500,1000,1500,2000,3000", "open-loop rates to try in turn, requests/s")
	fs.DurationVar(&c.Duration, "duration", 2*time.Second, "send window per rate")
	fs.IntVar(&c.Sequential, "sequential", 1000, "one-at-a-time requests measured first (the unloaded round trip)")
	fs.IntVar(&c.BodyBytes, "body-bytes", 8192, "request body size")
	fs.StringVar(&c.Prompt, "prompt", "text", "prompt form: text (routed on load alone: no tokenizer in-process) or ids (token ids: the policy runs)")
	fs.IntVar(&c.Engines, "engines", 2, "near-instant engines (bench/sim with 10,000x shorter steps) behind the gateway")
	fs.StringVar(&c.Policy, "policy", "loadaware", "the picker's policy")
	fs.StringVar(&c.Mode, "body-mode", "full-duplex", "ext_proc body mode: full-duplex or buffered")
	fs.DurationVar(&c.Limit, "p99-limit", 2*time.Millisecond, "a rate passes when the p99 added latency stays under this")
	fs.Uint64Var(&c.Seed, "seed", 1, "arrival-time seed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	var err error
	if c.Rates, err = parseRates(*rates); err != nil {
		return usageError{err}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start the CPU profile: %v", err)
		}
		defer pprof.StopCPUProfile()
	}
	return gwload.Run(ctx, c, stdout, stderr)
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive number: pass a list like 500,1000,2000", f)
		}
		out = append(out, v)
	}
	return out, nil
}
