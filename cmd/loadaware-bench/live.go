package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/live"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

func init() {
	register(command{name: "live", summary: "arms x seeds live: engines as HTTP servers pushing ZeroMQ, requests through the gateway and ext_proc", run: runLive})
}

// runLive is `loadaware-bench live`: each (arm, seed) through live engines, the real picker
// and the gateway, one after another, with the same outputs as sweep, and (by default) the
// same arms and seeds in virtual time beside them.
func runLive(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	cfg := experiment.DefaultConfig()
	var sf sweepFlags
	sf.register(fs, &cfg, "kvaware,loadaware-b1", "1", routerEnvoy, "bench-live")
	twins := fs.Bool("vtime", true, "also run every arm and seed in virtual time and report both")
	timeout := fs.Duration("timeout", 0, "bound on one seed's run from its first send (0: its send window plus 2 minutes)")
	verbose := fs.Bool("v", false, "show the picker's, the gateway's and the engines' logs on stderr")
	replicas := fs.Int("replicas", 1, "picker replicas, each with its own gateway; requests spread over them in turn (docs/replicas.md)")
	naive := fs.Bool("naive", false, "with -replicas > 1: no shared state (each replica sees its own engines' LMCache messages and its own bookings)")
	failOpen := fs.Bool("fail-open", false, "run the gateways with failure_mode_allow true (a request whose picker dies goes on to a fallback engine or continues unprocessed)")
	killHalf := fs.Bool("kill-half", false, "with -replicas > 1: kill the last replica abruptly half-way through each seed")
	showReplicas := fs.Bool("replica-stats", false, "print the shared-state line (decision latency, traffic) even for one replica")
	cache := fs.String("cache-source", "lmcache", "the picker's cache source: lmcache, or vllm-events / both (the engines also publish vLLM KV events; needs -warmup 0)")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	if err := sf.apply(&cfg); err != nil {
		return usageError{err}
	}
	if *replicas < 1 || *replicas > 16 {
		return usagef("-replicas %d: use 1 to 16", *replicas)
	}
	if *killHalf && *replicas < 2 {
		return usagef("-kill-half needs -replicas 2 or more")
	}
	cfg.Workers = 1
	logLevel := slog.LevelError + 4
	if *verbose {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	start := time.Now()
	res := experiment.Results{Config: cfg}
	meta := experiment.Meta{Mode: experiment.ModeLive, Command: strings.TrimSpace("loadaware-bench live " + strings.Join(args, " ")), Workers: 1, NoCSVs: !sf.csvs}
	for _, arm := range cfg.Arms {
		for _, seed := range cfg.Seeds {
			bar := progress.New(stderr, fmt.Sprintf("live %s seed %d", arm.Name, seed), sf.progress)
			lo := live.Options{WarmUp: vtime.WarmUp, Timeout: *timeout, Progress: bar.Update, Logger: log, CacheSource: *cache, Replicas: *replicas, Naive: *naive, FailOpen: *failOpen}
			if *killHalf {
				lo.KillAt = cfg.Workload.Requests / 2
			}
			r, err := live.Run(ctx, cfg, arm, seed, lo)
			bar.Finish()
			if err != nil {
				return fmt.Errorf("%s seed %d: %v", arm.Name, seed, err)
			}
			res.Runs = append(res.Runs, r.Run)
			if *replicas > 1 || *showReplicas {
				printReplicaStats(stdout, arm.Name, seed, r.Replicas)
			}
			meta.Live = append(meta.Live, experiment.LiveInfo{Messages: r.Messages, Received: r.Received, WarmEvents: r.WarmEvents,
				InFlightAfter: r.InFlightAfter, WallSeconds: r.Wall.Seconds()})
			if *twins {
				t, err := vtime.RunOne(ctx, cfg, arm, seed)
				if err != nil {
					return fmt.Errorf("%s seed %d in virtual time: %v", arm.Name, seed, err)
				}
				meta.Reference = append(meta.Reference, t)
			}
		}
	}
	meta.Wall = time.Since(start)
	if _, err := analysis.WriteAll(sf.out, res, meta, true); err != nil {
		return err
	}
	analysis.WriteTwinsText(stdout, res.Runs, meta)
	fmt.Fprintf(stdout, "%d live runs in %.1f s\nreport: %s\n", len(res.Runs), meta.Wall.Seconds(), reportPath(sf.out))
	return nil
}

// printReplicaStats writes one line of a run's shared-state figures.
func printReplicaStats(w io.Writer, arm string, seed uint64, st live.ReplicaStats) {
	fmt.Fprintf(w, "replicas %s seed %d: replicas=%d naive=%v shared_messages=%.0f shared_bytes=%.0f corrections=%.0f decision_p50=%s decision_p99=%s",
		arm, seed, st.Replicas, st.Naive, st.Messages, st.Bytes, st.Corrections, st.DecisionP50, st.DecisionP99)
	if st.Killed {
		fmt.Fprintf(w, " killed_at=%s failed_on_killed=%d failed_elsewhere=%d view_healed=%s", st.KilledAt.Round(time.Millisecond), st.FailedOnKilled, st.FailedElsewhere, st.ViewHealed)
	}
	fmt.Fprintln(w)
}
