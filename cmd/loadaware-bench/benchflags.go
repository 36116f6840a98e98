package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/scoring"
)

// sweepFlags are the flags sweep and live share: which arms and seeds, the fleet, every
// workload parameter and the outputs. Parsing writes the plain ones into the config; apply
// writes the rest.
type sweepFlags struct {
	engineLists
	arms, seeds, router, out string
	csvs, progress           bool
}

// engineLists are the per-engine lists as typed (-slowdowns, -host-delays), kept as text
// until apply parses them into a config; sweep, live and tournament declare them.
type engineLists struct {
	slowdowns, hostDelays string
}

// apply parses the lists into cfg's Slowdowns and HostDelays, naming the flag on error.
func (f engineLists) apply(cfg *experiment.Config) error {
	slow, err := parseList(f.slowdowns, "a number", parseFloat)
	if err != nil {
		return fmt.Errorf("-slowdowns: %w", err)
	}
	hosts, err := parseList(f.hostDelays, "a duration (e.g. 20ms)", time.ParseDuration)
	if err != nil {
		return fmt.Errorf("-host-delays: %w", err)
	}
	cfg.Slowdowns, cfg.HostDelays = slow, hosts
	return nil
}

// register adds the shared flags to fs, with cfg's values and the given arms, seeds, router
// and results directory as defaults.
func (f *sweepFlags) register(fs *flag.FlagSet, cfg *experiment.Config, arms, seeds, router, out string) {
	f.arms, f.seeds = arms, seeds
	fs.StringVar(&f.arms, "arms", arms, "arms, comma-separated: \"all\" (the 7 default arms), a name (kvaware, roundrobin, loadaware-b0, loadaware-b0.5, loadaware-b1, loadaware-b2, leastload), a policy ("+strings.Join(scoring.Names, ", ")+"), policy:beta, or gie (GIE v1.5.0's own scheduler, virtual time only)")
	fs.StringVar(&f.seeds, "seeds", seeds, "seeds: N (that seed), A-B (a range) or a comma-separated list")
	fs.IntVar(&cfg.Engines, "engines", cfg.Engines, "simulated engines (GPUs)")
	f.slowdowns = joinList(cfg.Slowdowns, formatFloat)
	fs.StringVar(&f.slowdowns, "slowdowns", f.slowdowns, "step-time factor of each engine, engine 0 first (engines not listed: 1); the default is the calibrated testbed (docs/bench/simulator.md)")
	f.hostDelays = joinList(cfg.HostDelays, time.Duration.String)
	fs.StringVar(&f.hostDelays, "host-delays", f.hostDelays, "extra host time per step of each engine, engine 0 first (engines not listed: 0); the default is the calibrated testbed")
	fs.StringVar(&cfg.Protocol, "protocol", cfg.Protocol, "published: per arm a cold fleet, the published warm-up routed by the arm, the seeds back to back; per-seed: each seed on its own fleet after -warmup requests")
	fs.DurationVar(&cfg.SeedGap, "seed-gap", cfg.SeedGap, "published protocol: idle time between a seed's last completion and the next seed")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "per-seed protocol: requests run through the same arm (and discarded) before each measured seed, so caches are warm")
	f.router = router
	fs.StringVar(&f.router, "router", f.router, "what stands in front of the engines: published (the Production Stack's Python router: stale fallback stats, 48 ms on the first token) or envoy (Envoy with this picker)")
	fs.StringVar(&cfg.HashSeed, "hash-seed", cfg.HashSeed, "the engines' PYTHONHASHSEED, for LMCache chunk keys")
	cfg.Workload.RegisterFlags(fs)
	fs.StringVar(&f.out, "out", out, "results directory: REPORT.md, figures/, seeds.csv, runs/<arm>/seed-NN.csv, "+experiment.FileName)
	fs.BoolVar(&f.csvs, "csv", true, "write the per-request CSV of every run (about 200 kB each at 500 requests)")
	fs.BoolVar(&f.progress, "progress", true, "show progress on stderr")
}

// apply writes the parsed arms, seeds and slowdowns into cfg and validates it.
func (f *sweepFlags) apply(cfg *experiment.Config) error {
	arms, err := experiment.ParseArms(f.arms)
	if err != nil {
		return err
	}
	seeds, err := experiment.ParseSeeds(f.seeds)
	if err != nil {
		return err
	}
	if err := f.engineLists.apply(cfg); err != nil {
		return err
	}
	if cfg.Router, err = parseRouter(f.router); err != nil {
		return err
	}
	cfg.Arms, cfg.Seeds = arms, seeds
	return cfg.Validate()
}

// The -router values.
const (
	routerPublished = "published"
	routerEnvoy     = "envoy"
)

func parseRouter(s string) (experiment.Router, error) {
	switch s {
	case routerPublished:
		return experiment.PublishedRouter(), nil
	case routerEnvoy:
		return experiment.EnvoyRouter(), nil
	}
	return experiment.Router{}, fmt.Errorf("-router %q: use %s or %s", s, routerPublished, routerEnvoy)
}

// parseList parses a comma-separated list with parse, each item trimmed; a blank s is the
// empty list. A bad item's error says "<item> is not <what>".
func parseList[T any](s, what string, parse func(string) (T, error)) ([]T, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []T
	for _, part := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not %s", part, what)
		}
		out = append(out, v)
	}
	return out, nil
}

// joinList writes xs comma-separated, each with format: a list parseList reads back.
func joinList[T any](xs []T, format func(T) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = format(x)
	}
	return strings.Join(parts, ",")
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// parseInterleaved parses fs allowing flags after positional arguments (compare A B -metric
// x), and returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
