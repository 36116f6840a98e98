package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/loadaware/loadaware-epp/bench/demo"
)

func init() {
	register(command{name: "demo", summary: "a short live run through the real gateway, ext_proc and ZeroMQ paths (kvaware, loadaware, latencyaware, ttftaware), then the same arms in virtual time", run: runDemo})
}

// runDemo is `loadaware-bench demo` (bench/demo).
func runDemo(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var c demo.Config
	fs.StringVar(&c.Arms, "arms", "kvaware,loadaware-b1,latencyaware,ttftaware", "arms to run in turn (names as in sweep -arms)")
	fs.IntVar(&c.Requests, "requests", 100, "live requests per arm")
	fs.Float64Var(&c.Rate, "rate", 16, "mean arrival rate, requests/s (open-loop Poisson)")
	fs.IntVar(&c.Tokens, "max-tokens", 64, "output tokens per request")
	fs.IntVar(&c.Warmup, "warmup", 0, "0: the published warm-up (2 passes over the prefixes, 4 at a time, routed by the arm); N: N random requests instead")
	fs.Uint64Var(&c.Seed, "seed", 1, "workload seed (the same requests for every arm)")
	fs.IntVar(&c.Samples, "samples", 2, "decisions to print per arm (requests sent with x-loadaware-explain: 1)")
	fs.IntVar(&c.VSeeds, "vtime-seeds", 20, "then run the same arms on this many seeds of the same workload in virtual time and test the difference (0: skip)")
	fs.DurationVar(&c.Timeout, "timeout", 40*time.Second, "bound on one arm's live requests; unfinished requests count as errors")
	fs.BoolVar(&c.Progress, "progress", true, "show progress on stderr")
	fs.BoolVar(&c.Verbose, "v", false, "show the picker's, the gateway's and the engines' logs on stderr")
	fs.BoolVar(&c.Hold, "hold", false, "after the last arm's requests, print the results and keep its picker, gateway and engines up (send your own traffic, watch /metrics) until interrupted")
	fs.StringVar(&c.Cache, "cache-source", "lmcache", "the picker's cache source: lmcache, or vllm-events / both (the engines also publish vLLM KV events; needs -warmup 0)")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	return demo.Run(ctx, c, stdout, stderr)
}
