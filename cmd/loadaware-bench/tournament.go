package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/tournament"
	"github.com/loadaware/loadaware-epp/bench/trace"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

func init() {
	register(command{name: "tournament", summary: "every arm on every workload profile behind Envoy, paired by seed: a markdown report, JSON and a summary figure", run: runTournament})
}

// runTournament is `loadaware-bench tournament [-profiles a,b] [-arms ...] [-seeds N|A-B]
// [-json FILE] [-out FILE.md] [-workers N] [-quiet]` plus the profile overrides.
func runTournament(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	profiles := fs.String("profiles", "all", "profiles, comma-separated: all, or any of "+strings.Join(tournament.ProfileNames(), ", ")+"; run only when named: "+strings.Join(tournament.ExtraNames(), ", "))
	arms := fs.String("arms", "all", "arms, comma-separated: all (every policy but session, loadaware at beta 0, 0.5, 1 and 2, and gie), or names as in sweep (kvaware, loadaware-b1, a policy, policy:beta, gie), a policy's ending in +residency to weigh the engines' LoRA adapters, or in +ranks to tell the engines' data-parallel ranks apart (the dp and dp-replicas profiles), then +scraped to weigh the ranks' scraped loads too")
	seeds := fs.String("seeds", "1-20", "seeds, the same for every profile and arm: N, A-B or a comma-separated list (the published profile has the measured seeds 1-20)")
	out := fs.String("out", "tournament.md", "markdown report; the summary figure goes beside it (same name, .png)")
	jsonOut := fs.String("json", "", "also write every seed's metrics as JSON to this file")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "cells (profile x arm) simulated in parallel (results do not depend on it)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	var src profileSource
	fs.StringVar(&src.workload, "workload", "", "run this workload instead of -profiles: a workload file (JSON or YAML) or a shipped profile ("+strings.Join(workload.ShippedProfiles(), ", ")+"), as one profile named after it on the file's fleet (its engines, slowdowns and kv-pool-tokens keys; unset, the calibrated 2-engine fleet)")
	fs.StringVar(&src.trace, "trace", "", "run this Mooncake trace instead of -profiles: a file or "+strings.Join(trace.Names(), ", ")+", as one profile named after it whose -windows are the seeds; -engines defaults to the measured fleet of an embedded trace at -speedup 1 and is required otherwise")
	fs.IntVar(&src.windows, "windows", 0, "with -trace: cut the trace into this many consecutive equal windows, the paired seeds 1..N")
	fs.Float64Var(&src.speedup, "speedup", 1, "with -trace: divides the trace's clock (2 sends twice as fast)")
	fs.IntVar(&src.holdout, "holdout", 0, fmt.Sprintf("run this many held-out profiles (1..%d) instead of -profiles: shapes drawn at random from the declared space (docs/decisions/1620), each at its drawn share of its fleet's measured capacity; 0: the named profiles", tournament.MaxHoldout))
	fs.Uint64Var(&src.holdoutSeed, "holdout-seed", tournament.DefaultHoldoutSeed, "with -holdout: the seed of the draw (the default was fixed before any held-out run)")
	ladder := fs.String("ladder", "", "with -workload: the knee report instead of the tournament: run the workload at every rate of a ladder, published (the file's ladder key, scaled to the fleet's measured capacity when it exceeds it) or R1,R2,... req/s, and report TTFT p90 and input tokens/s against offered load per arm (-out; -json holds one profile per rate)")
	sample := fs.Duration("sample-interval", tournament.DefaultSampleInterval, "how often the engines' running counts and cache counters are sampled (imbalance, hit rate)")
	scratch := experiment.DefaultConfig()
	var of overrideFlags
	of.register(fs, &scratch)
	fs.Usage = func() {} // a bad flag is the flag package's one line; -h prints the help below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: loadaware-bench tournament [flags]\n\nRuns every arm on every profile (one cell per profile and arm under the published cell protocol, behind\nEnvoy and this picker), paired by seed, and writes a report: per-profile tables, paired tests against the\nbest other arm, and a summary figure. Fleet and workload flags override the selected profiles' values;\nunset, each profile keeps its own (the defaults shown are the published workload's).\n\n")
			fs.PrintDefaults()
			return nil
		}
		return errFlags
	}
	src.profiles, src.seeds = *profiles, *seeds
	if *ladder != "" && src.holdout != 0 {
		return usagef("-ladder with -holdout: a ladder runs one -workload's rates; drop one of them")
	}
	cfg, err := tournamentConfig(ctx, fs, of.names, src, *arms, *workers, *sample)
	if err != nil {
		return usageError{err}
	}
	if *out == "" {
		return usagef("-out is empty: name the markdown report, e.g. -out tournament.md")
	}
	if *ladder != "" {
		return runLadder(ctx, cfg, src.workload, *ladder, *out, *jsonOut, *quiet, args, stdout, stderr)
	}
	bar := progress.New(stderr, "tournament", !*quiet)
	cfg.Progress = func(done, total int, _, _ string) { bar.Update(done, total) }
	start := time.Now()
	res, err := tournament.Run(ctx, cfg)
	bar.Finish()
	if err != nil {
		return err
	}
	wall := time.Since(start)
	command := "loadaware-bench " + strings.Join(append([]string{"tournament"}, args...), " ")
	write := func() error { return tournament.WriteFiles(res, *out, *jsonOut, command) }
	if src.holdout > 0 {
		write = func() error { return tournament.WriteHoldoutFiles(res, src.holdoutSeed, *out, *jsonOut, command) }
	}
	if err := write(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d cells (%d profiles x %d arms x %d seeds) in %.1f s with %d workers\nreport: %s\n",
		len(cfg.Profiles)*len(cfg.Arms), len(cfg.Profiles), len(cfg.Arms), len(cfg.Seeds), wall.Seconds(), cfg.Workers, *out)
	return nil
}

// runLadder is -ladder: the knee report of the one -workload profile in cfg.
// It measures the fleet's capacity (tournament.Capacity, offered the larger
// of CapacityOverload times the profile's rate and the published ladder's
// top), chooses the rates, runs the arms at each and writes the report.
func runLadder(ctx context.Context, cfg tournament.Config, wl, ladder, out, jsonOut string, quiet bool, args []string, stdout, stderr io.Writer) error {
	if wl == "" {
		return usagef("-ladder runs one workload's rates: pass -workload FILE|NAME too")
	}
	f, err := workload.Resolve(wl)
	if err != nil {
		return usagef("-workload: %w", err)
	}
	k := tournament.Knee{Name: cfg.Profiles[0].Name, Source: f.Source}
	var given []float64
	if ladder == "published" {
		if f.Ladder == nil {
			return usagef("-ladder published: the workload %s has no ladder key: add one to the file or pass -ladder R1,R2,... req/s", k.Name)
		}
		k.Published = f.Ladder
	} else if given, err = parseList(ladder, "a number", parseFloat); err != nil || len(given) == 0 || !slices.IsSorted(given) || slices.ContainsFunc(given, func(x float64) bool { return !(x > 0) }) {
		return usagef("-ladder %q: use published or ascending positive rates in req/s, e.g. 0.1,0.2,0.4", ladder)
	}
	prof := cfg.Profiles[0]
	k.Offered = tournament.CapacityOverload * prof.Fleet.Workload.Rate
	if k.Published != nil {
		k.Offered = max(k.Offered, k.Published[len(k.Published)-1])
	}
	start := time.Now()
	if k.Capacity, err = tournament.Capacity(ctx, prof, k.Offered, cfg.SampleInterval); err != nil {
		return fmt.Errorf("-ladder: measuring the fleet's capacity: %w", err)
	}
	k.Rates, k.Scale = given, 1
	if k.Published != nil {
		k.Rates, k.Scale = tournament.ScaleLadder(k.Published, k.Capacity)
	}
	cfg.Profiles = tournament.LadderProfiles(prof, k.Rates)
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	bar := progress.New(stderr, "ladder", !quiet)
	cfg.Progress = func(done, total int, _, _ string) { bar.Update(done, total) }
	res, err := tournament.Run(ctx, cfg)
	bar.Finish()
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if err := tournament.WriteKneeFiles(res, k, out, jsonOut, "loadaware-bench "+strings.Join(append([]string{"tournament"}, args...), " ")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ladder of %d rates x %d arms x %d seeds (capacity %.3g req/s) in %.1f s with %d workers\nreport: %s\n",
		len(k.Rates), len(cfg.Arms), len(cfg.Seeds), k.Capacity, wall.Seconds(), cfg.Workers, out)
	return nil
}

// profileSource is what the tournament runs: -profiles and -seeds, a workload
// file (-workload), a trace's windows (-trace, -windows, -speedup) or a
// held-out draw (-holdout, -holdout-seed).
type profileSource struct {
	profiles, seeds, workload, trace string
	windows                          int
	speedup                          float64
	holdout                          int
	holdoutSeed                      uint64
}

// tournamentConfig turns the parsed flags into the tournament: the selected profiles with
// the fleet and workload flags set on the command line applied to each. A held-out draw
// measures each drawn fleet's capacity, in virtual time, after every flag is checked.
func tournamentConfig(ctx context.Context, fs *flag.FlagSet, overrides map[string]bool, src profileSource, arms string, workers int, sample time.Duration) (tournament.Config, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	cfg := tournament.Config{SampleInterval: sample, Workers: workers}
	var err error
	if cfg.Arms, err = tournamentArms(arms); err != nil {
		return cfg, err
	}
	switch {
	case workers < 1:
		return cfg, fmt.Errorf("-workers %d: use 1 or more", workers)
	case sample <= 0:
		return cfg, fmt.Errorf("-sample-interval %v: use a positive duration, e.g. 250ms", sample)
	}
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if overrides[f.Name] {
			set = append(set, "-"+f.Name+"="+f.Value.String())
		}
	})
	if src.holdout != 0 && len(set) > 0 {
		return cfg, fmt.Errorf("%s with -holdout: a held-out profile's fleet and workload are drawn; drop %s", set[0], strings.Join(set, " "))
	}
	if cfg.Profiles, cfg.Seeds, err = tournamentProfiles(ctx, fs, given, src, sample); err != nil {
		return cfg, err
	}
	for i := range cfg.Profiles {
		p := &cfg.Profiles[i]
		pfs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
		pfs.SetOutput(io.Discard)
		var pf overrideFlags
		pf.register(pfs, &p.Fleet)
		if err := pfs.Parse(set); err != nil {
			return cfg, err
		}
		if err := pf.apply(&p.Fleet); err != nil {
			return cfg, err
		}
	}
	return cfg, cfg.Validate()
}

// tournamentProfiles returns the profiles and seeds src selects; given are
// the flags set on the command line.
func tournamentProfiles(ctx context.Context, fs *flag.FlagSet, given map[string]bool, src profileSource, sample time.Duration) ([]tournament.Profile, []uint64, error) {
	switch {
	case src.holdout < 0 || src.holdout > tournament.MaxHoldout:
		return nil, nil, fmt.Errorf("-holdout %d: draw 1..%d held-out profiles (0 runs the named ones)", src.holdout, tournament.MaxHoldout)
	case src.holdout == 0 && given["holdout-seed"]:
		return nil, nil, errors.New("-holdout-seed seeds a held-out draw: pass -holdout N too")
	case src.holdout > 0 && (given["profiles"] || src.workload != "" || src.trace != ""):
		return nil, nil, errors.New("-holdout with -profiles, -workload or -trace: the held-out draw is the profiles; pass one of them")
	case src.holdout > 0:
		seeds, err := experiment.ParseSeeds(src.seeds)
		if err != nil {
			return nil, nil, err
		}
		profs, err := tournament.HoldoutProfiles(ctx, src.holdoutSeed, src.holdout, sample)
		if err != nil {
			return nil, nil, fmt.Errorf("-holdout: %w", err)
		}
		return profs, seeds, nil
	case src.workload != "" && src.trace != "":
		return nil, nil, errors.New("-workload and -trace: pass one of them (one profile each)")
	case (src.workload != "" || src.trace != "") && given["profiles"]:
		return nil, nil, errors.New("-profiles with -workload or -trace: the file is the one profile; drop -profiles")
	case src.trace == "" && (given["windows"] || given["speedup"]):
		return nil, nil, errors.New("-windows and -speedup select a trace's windows: pass -trace FILE too")
	}
	if src.trace != "" {
		return traceProfile(fs, given, src)
	}
	seeds, err := experiment.ParseSeeds(src.seeds)
	if err != nil {
		return nil, nil, err
	}
	if src.workload != "" {
		f, err := workload.Resolve(src.workload)
		if err != nil {
			return nil, nil, fmt.Errorf("-workload: %w", err)
		}
		return []tournament.Profile{tournament.FileProfile(f)}, seeds, nil
	}
	var names []string
	if strings.TrimSpace(src.profiles) != "all" {
		for _, n := range strings.Split(src.profiles, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			return nil, nil, fmt.Errorf("-profiles is empty: use all or any of %s", strings.Join(tournament.ProfileNames(), ", "))
		}
	}
	profs, err := tournament.SelectProfiles(names)
	if err != nil {
		return nil, nil, fmt.Errorf("-profiles: %w", err)
	}
	return profs, seeds, nil
}

// traceProfile is -trace's one profile and its seeds, the windows 1..N: on
// -engines engines, by default the embedded trace's measured fleet; -requests,
// when given, caps each window.
func traceProfile(fs *flag.FlagSet, given map[string]bool, src profileSource) ([]tournament.Profile, []uint64, error) {
	switch {
	case given["seeds"]:
		return nil, nil, errors.New("-seeds with -trace: a trace's seeds are its windows; pass -windows N instead")
	case src.windows < 1:
		return nil, nil, fmt.Errorf("-windows %d: -trace needs the number of windows to cut the trace into, 1 or more (each a paired seed)", src.windows)
	}
	tr, err := trace.Load(src.trace)
	if err != nil {
		return nil, nil, fmt.Errorf("-trace: %w", err)
	}
	fleet := experiment.DefaultConfig()
	if !given["engines"] {
		n, ok := tournament.TraceEngines(tr.Name, src.speedup)
		if !ok {
			return nil, nil, fmt.Errorf("-trace %s at -speedup %g has no measured fleet size: pass -engines N (docs/decisions/1540 sizes a fleet at 75%% of its capacity)", tr.Name, src.speedup)
		}
		fleet.Engines = n
	}
	o := trace.Options{Speedup: src.speedup, Context: tournament.TraceContext}
	if given["requests"] {
		if o.MaxRequests, err = strconv.Atoi(fs.Lookup("requests").Value.String()); err != nil {
			return nil, nil, fmt.Errorf("-requests: %w", err)
		}
	}
	p, err := tournament.TraceProfile(tr.Name, tr.Records, src.windows, o, fleet)
	if err != nil {
		return nil, nil, fmt.Errorf("-trace %s: %w", src.trace, err)
	}
	return []tournament.Profile{p}, experiment.SeedRange(1, uint64(src.windows)), nil
}

// tournamentArms reads -arms: "all" is tournament.DefaultArms, anything else a list as
// sweep's -arms takes it.
func tournamentArms(s string) ([]experiment.Arm, error) {
	if strings.TrimSpace(s) == "all" {
		return tournament.DefaultArms(), nil
	}
	arms, err := experiment.ParseArms(s)
	if err != nil {
		return nil, fmt.Errorf("-arms: %w", err)
	}
	for i, a := range arms {
		if slices.ContainsFunc(arms[:i], func(b experiment.Arm) bool { return b.Name == a.Name }) {
			return nil, fmt.Errorf("-arms: arm %s named twice", a.Name)
		}
	}
	return arms, nil
}

// overrideFlags are the fleet and workload flags a tournament applies to every selected
// profile: the workload's own flags plus the fleet's.
type overrideFlags struct {
	engineLists
	names map[string]bool // the flags register added
}

// register adds the override flags to fs with cfg's values as defaults.
func (f *overrideFlags) register(fs *flag.FlagSet, cfg *experiment.Config) {
	before := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) { before[fl.Name] = true })
	fs.IntVar(&cfg.Engines, "engines", cfg.Engines, "override: simulated engines (GPUs)")
	f.slowdowns, f.hostDelays = joinList(cfg.Slowdowns, formatFloat), joinList(cfg.HostDelays, time.Duration.String)
	fs.StringVar(&f.slowdowns, "slowdowns", f.slowdowns, "override: step-time factor of each engine, engine 0 first (engines not listed: 1)")
	fs.StringVar(&f.hostDelays, "host-delays", f.hostDelays, "override: extra host time per step of each engine, engine 0 first (engines not listed: 0)")
	fs.IntVar(&cfg.Engine.KVPoolTokens, "kv-pool-tokens", cfg.Engine.KVPoolTokens, "override: tokens of KV each engine's GPU pool holds")
	fs.Int64Var(&cfg.Engine.CPUTierBytes, "cpu-tier-bytes", cfg.Engine.CPUTierBytes, "override: bytes of each engine's LMCache CPU tier (0: none)")
	fs.DurationVar(&cfg.SeedGap, "seed-gap", cfg.SeedGap, "override: idle time between a seed's last completion and the next seed's first send")
	fs.StringVar(&cfg.HashSeed, "hash-seed", cfg.HashSeed, "override: the engines' PYTHONHASHSEED, for LMCache chunk keys")
	cfg.Workload.RegisterFlags(fs)
	f.names = map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) {
		if !before[fl.Name] {
			f.names[fl.Name] = true
		}
	})
}

// apply writes the parsed per-engine lists into cfg.
func (f *overrideFlags) apply(cfg *experiment.Config) error {
	if err := f.engineLists.apply(cfg); err != nil {
		return err
	}
	if len(cfg.Slowdowns) > cfg.Engines {
		return fmt.Errorf("-slowdowns: %d factors for %d engines: give at most one per engine (-engines)", len(cfg.Slowdowns), cfg.Engines)
	}
	return nil
}
