// Package demo is `loadaware-bench demo`: each arm on a fresh live fleet (two simulated
// engines on the wall clock, the real picker behind bench/gateway, LMCache events over
// ZeroMQ) warmed up in virtual time, a short seed of live requests, the comparison, and then
// the same arms on many seeds in virtual time with paired tests. It drives both bench/live and
// bench/vtime, which know nothing of each other.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/live"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/picker"
)

// Config is one demo; the fields are the command's flags.
type Config struct {
	Arms     string        // arms run in turn, as sweep -arms names them
	Requests int           // live requests per arm
	Rate     float64       // mean arrival rate, requests/s
	Tokens   int           // output tokens per request
	Warmup   int           // 0: the published warm-up; N: N random requests instead
	Seed     uint64        // workload seed, the same requests for every arm
	Samples  int           // decisions printed per arm
	VSeeds   int           // seeds of the virtual-time comparison after the live runs (0: none)
	Timeout  time.Duration // bound on one arm's live requests
	Progress bool          // progress on stderr
	Verbose  bool          // the picker's, gateway's and engines' logs on stderr
	Hold     bool          // keep the last arm's fleet up until ctx ends
	Cache    string        // the picker's --cache-source
}

// Run runs the demo, printing to stdout; progress and logs go to stderr. With Hold it
// returns only when ctx ends.
func Run(ctx context.Context, c Config, stdout, stderr io.Writer) error {
	if c.Requests < 1 || c.Rate <= 0 || c.Tokens < 1 || c.Warmup < 0 || c.Samples < 0 || c.VSeeds < 0 || c.Timeout <= 0 {
		return errors.New("-requests, -rate, -max-tokens and -timeout must be positive, -warmup, -samples and -vtime-seeds not negative")
	}
	cfg := experiment.DefaultConfig()
	cfg.Workload.Requests, cfg.Workload.Rate, cfg.Workload.MaxTokens, cfg.Warmup = c.Requests, c.Rate, c.Tokens, c.Warmup
	if c.Warmup > 0 || (c.Cache != "" && c.Cache != picker.SourceLMCache) {
		// A vLLM-events source starts cold: the warm-up's chunk events exist only as
		// LMCache messages (bench/live refuses a warm-up with it).
		cfg.Protocol = experiment.ProtocolPerSeed
	}
	// The demo shows this picker: Envoy (bench/gateway) in front, no Python proxy.
	cfg.Router = experiment.EnvoyRouter()
	arms, err := experiment.ParseArms(c.Arms)
	if err != nil {
		return err
	}
	cfg.Arms, cfg.Seeds = arms, []uint64{c.Seed}
	if err := cfg.Validate(); err != nil {
		return err
	}
	logLevel := slog.LevelError + 4
	if c.Verbose {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	w := cfg.Workload
	fmt.Fprintf(stdout, "loadaware-bench demo: the real picker (ext_proc gRPC + the embedded LMCache controller) behind bench/gateway,\n")
	fmt.Fprintf(stdout, "in front of %d live simulated vLLM + LMCache engines: the calibrated A10 model (bench/sim) on the wall clock,\n", cfg.Engines)
	fmt.Fprintf(stdout, "each an HTTP server on its own loopback IP pushing its LMCache chunk events over ZeroMQ%s.\n", engineNotes(cfg))
	warm := "the published warm-up (2 passes over the prefixes, 4 at a time, routed by the arm)"
	if cfg.Protocol == experiment.ProtocolPerSeed {
		warm = fmt.Sprintf("%d requests", cfg.Warmup)
	}
	if cfg.Protocol == experiment.ProtocolPerSeed && cfg.Warmup == 0 {
		warm = "nothing (cold caches)"
	}
	fmt.Fprintf(stdout, "Each arm: a fresh fleet warmed up with %s in virtual time, then %d live requests at %g req/s\n", warm, w.Requests, w.Rate)
	fmt.Fprintf(stdout, "(%d prefixes of %d tokens, Zipf %g, %d-token suffixes, %d output tokens; seed %d, the same requests for every arm).\n\n",
		w.Prefixes, w.PrefixTokens, w.ZipfS, w.SuffixTokens, w.MaxTokens, c.Seed)

	step := max(c.Requests/max(c.Samples, 1), 1)
	explain := func(i int) bool { return c.Samples > 0 && i%step == step/2 && i/step < c.Samples }
	var results []live.Result
	summary := func(ctx context.Context) error {
		printLive(stdout, cfg, results)
		if c.VSeeds > 0 {
			return virtualSweep(ctx, cfg, c, stdout, stderr)
		}
		return nil
	}
	// The held picker's /admin endpoints (loadaware-epp check needs /admin/state) take the
	// caller's LOADAWARE_ADMIN_TOKEN, else a new token the hold message shows.
	token := os.Getenv("LOADAWARE_ADMIN_TOKEN")
	ownToken := token != ""
	if !ownToken && c.Hold {
		token = newAdminToken()
	}
	var held bool
	var holdErr error
	for i, arm := range arms {
		bar := progress.New(stderr, fmt.Sprintf("%-14s", arm.Name), c.Progress)
		opts := live.Options{WarmUp: vtime.WarmUp, Timeout: c.Timeout, Explain: explain, Progress: bar.Update, Logger: log, CacheSource: c.Cache}
		var metricsURL, gatewayURL string
		opts.Started = func(m, g string) {
			metricsURL, gatewayURL = m, g
			fmt.Fprintf(stdout, "%s: the picker's metrics are at %s while its requests run\n", arm.Name, m)
		}
		if c.Hold && i == len(arms)-1 {
			opts.AdminToken = token
			opts.Hold = func(ctx context.Context, r live.Result) {
				bar.Finish()
				held, results = true, append(results, r)
				if holdErr = summary(ctx); holdErr != nil {
					return
				}
				printHold(stdout, arm.Name, metricsURL, gatewayURL, token, ownToken)
				<-ctx.Done()
			}
		}
		r, err := live.Run(ctx, cfg, arm, c.Seed, opts)
		bar.Finish()
		if err != nil {
			return fmt.Errorf("%s: %w", arm.Name, err)
		}
		if !held {
			results = append(results, r)
		}
	}
	if holdErr != nil {
		return holdErr
	}
	if !held {
		if err := summary(ctx); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.InFlightAfter != 0 {
			return fmt.Errorf("the picker still counts %v requests in flight after %s: a booking leaked", r.InFlightAfter, r.Run.Arm.Name)
		}
		if r.Messages != r.Received {
			return fmt.Errorf("%s: the engines pushed %d LMCache messages but the controller received %d", r.Run.Arm.Name, r.Messages, r.Received)
		}
	}
	return nil
}

// cols are the metrics the demo's tables show.
var cols = []string{"TTFT p50", "TTFT p95", "e2e p95", "imbalance", "hit rate", "miss@150ms"}

func printLive(w io.Writer, cfg experiment.Config, results []live.Result) {
	fmt.Fprintln(w, "\nRequests per engine:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "engine\t"
	for _, r := range results {
		head += r.Run.Arm.Name + "\t"
	}
	fmt.Fprintln(tw, head)
	for i := range cfg.Engines {
		label := fmt.Sprintf("engine %d", i)
		if n := cfg.EngineNote(i); n != "" {
			label += " (" + n + ")"
		}
		row := label + "\t"
		for _, r := range results {
			row += fmt.Sprintf("%d\t", r.Run.Engines[i].Requests)
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nAs the client saw it (seconds; imbalance = mean running requests of the busiest engine / the idlest, sampled from /metrics):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "arm\t%s\terrors\tLMCache msgs pushed/received\twall s\t\n", strings.Join(cols, "\t"))
	metrics := make([]analysis.SeedMetrics, len(results))
	for i, r := range results {
		metrics[i] = analysis.SeedMetricsOf(r.Run)
		fmt.Fprintf(tw, "%s\t", r.Run.Arm.Name)
		for _, c := range cols {
			met, _ := analysis.MetricByName(c)
			fmt.Fprintf(tw, "%s\t", analysis.FormatMetric(c, met.Value(metrics[i])))
		}
		fmt.Fprintf(tw, "%d\t%d/%d\t%.1f\t\n", metrics[i].Errors, r.Messages, r.Received, r.Wall.Seconds())
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.Messages == 0 {
			fmt.Fprintf(w, "%s: no LMCache message during the seed: every prompt's prefix was already in its engine's CPU tier (the warm-up's %d chunk events reached the index), and LMCache saves nothing it finds.\n",
				r.Run.Arm.Name, r.WarmEvents)
		}
	}

	fmt.Fprintln(w, "\nSample decisions (x-loadaware-decision: matched = prompt tokens the engine holds, by the LMCache index):")
	for _, r := range results {
		for _, i := range slices.Sorted(maps.Keys(r.Decisions)) {
			fmt.Fprintf(w, "  %-14s request %d: %s\n", r.Run.Arm.Name, i, r.Decisions[i])
		}
	}
	base := slices.IndexFunc(results, func(r live.Result) bool { return r.Run.Arm.Name == analysis.Baseline })
	if base >= 0 {
		for i, r := range results {
			if i == base {
				continue
			}
			b, m := metrics[base], metrics[i]
			fmt.Fprintf(w, "\n%s against %s: imbalance %.2f -> %.2f, TTFT p95 %.3f s -> %.3f s, hit rate %.3f -> %.3f.",
				r.Run.Arm.Name, analysis.Baseline, b.Imbalance, m.Imbalance, b.TTFT.P95, m.TTFT.P95, b.HitRate, m.HitRate)
		}
		fmt.Fprintln(w, "\nOne short seed is one observation; the same arms on many seeds follow.")
	}
}

// virtualSweep runs the demo's arms on c.VSeeds seeds of the demo's workload in virtual
// time (the same picker code) and prints the medians and the paired tests against kvaware.
func virtualSweep(ctx context.Context, cfg experiment.Config, c Config, stdout, stderr io.Writer) error {
	cfg.Seeds = experiment.SeedRange(1, uint64(c.VSeeds))
	cfg.Workers = 0
	bar := progress.New(stderr, "virtual time", c.Progress)
	start := time.Now()
	res, err := vtime.RunSweep(ctx, cfg, bar.Update)
	bar.Finish()
	if err != nil {
		return err
	}
	a, err := analysis.Analyze(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nThe same arms on seeds 1-%d of this workload in virtual time (%.1f s): medians over seeds, then each arm against %s\n",
		c.VSeeds, time.Since(start).Seconds(), analysis.Baseline)
	fmt.Fprintf(stdout, "(one-sided exact Wilcoxon signed-rank on paired seeds, significant below p = %.3f):\n", analysis.Alpha)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "arm\t%s\t\n", strings.Join(cols, "\t"))
	for _, s := range a.Arms {
		fmt.Fprintf(tw, "%s\t", s.Arm.Name)
		for _, col := range cols {
			fmt.Fprintf(tw, "%s\t", analysis.FormatMetric(col, s.Median[col]))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	for _, p := range a.Comparisons {
		sig := "not significant"
		if p.Significant(analysis.Alpha) {
			sig = "significant"
		}
		fmt.Fprintf(stdout, "  %s vs %s, %s: median reduction %+.1f%% (95%% CI %+.1f%% to %+.1f%%), %d of %d seeds improve, p = %.4g: %s\n",
			p.Arm, analysis.Baseline, p.Metric, 100*p.Reduction, 100*p.CI.Lo, 100*p.CI.Hi, p.Improved, p.Seeds, p.Test.P, sig)
	}
	return nil
}

// engineNotes says which engines differ from the nominal model, as ", engine 1: ...".
func engineNotes(cfg experiment.Config) string {
	var b strings.Builder
	for i := range cfg.Engines {
		if n := cfg.EngineNote(i); n != "" {
			fmt.Fprintf(&b, "; engine %d: %s", i, n)
		}
	}
	return b.String()
}

// printHold says where to look while -hold keeps the last arm's fleet up. The picker's
// admin token is shown unless it came from the user's own LOADAWARE_ADMIN_TOKEN (own).
func printHold(w io.Writer, arm, metricsURL, gatewayURL, token string, own bool) {
	fmt.Fprintf(w, "\n-hold: the %s picker, its gateway and engines stay up until you press Ctrl-C.\n", arm)
	fmt.Fprintf(w, "  metrics:  %s\n", metricsURL)
	fmt.Fprintf(w, "  gateway:  %s (OpenAI completions, e.g. curl %s/v1/completions -d '{\"model\":\"m\",\"prompt\":[1,2,3],\"max_tokens\":8}')\n", gatewayURL, gatewayURL)
	env := "LOADAWARE_ADMIN_TOKEN=" + token + " "
	if own {
		env = "" // the picker took the caller's LOADAWARE_ADMIN_TOKEN
	}
	fmt.Fprintf(w, "  check:    %sloadaware-epp check -metrics %s -gateway %s\n", env, metricsURL, gatewayURL)
	fmt.Fprintf(w, "  Grafana:  import manifests/helm/loadaware-epp/files/grafana-dashboard.json with a Prometheus that scrapes the metrics URL\n")
}

// newAdminToken is a random admin token for a held picker when LOADAWARE_ADMIN_TOKEN is unset.
func newAdminToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
