package tournament

import (
	"fmt"
	"math"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/trace"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// TraceReplay is a trace profile's source: the trace's consecutive windows
// are its paired samples, seed s running window s (1-based).
type TraceReplay struct {
	Records []trace.Record
	Windows []trace.Window
	Options trace.Options // speed-up, request cap per window, context; the window is set per seed
	// Requests and Capped count the selected requests and the prompts cut
	// to the context over all windows; Reuse is their reuse ceiling
	// (trace.ReuseCeiling over the windows in order).
	Requests, Capped int
	Reuse            trace.Reuse
}

// TraceContext is the engines' context, in tokens, a trace's prompts are
// capped to (prompt plus completion).
const TraceContext = 32768

// traceEngines are the embedded traces' fleets: 75% of the measured capacity
// at speed-up 1 (docs/decisions/1540-trace-replay-and-public-profiles.md).
var traceEngines = map[string]int{"mooncake-conversation": 23, "mooncake-synthetic": 22}

// TraceEngines returns the fleet size a trace runs on by default: the
// measured one for the embedded traces at speed-up 1; false for any other
// trace or speed-up (the caller must choose).
func TraceEngines(name string, speedup float64) (int, bool) {
	n, ok := traceEngines[name]
	return n, ok && speedup == 1
}

// FileProfile is a workload file as a profile named after it behind Envoy,
// on the fleet the file asks for: the calibrated 2-engine fleet (step-time
// factors 1 and 1.3) with the file's engines, slowdowns and KV pool put in.
// With engines and no slowdowns, the calibrated factors that fit are kept
// (a 1-engine fleet is the fast engine alone) and the rest are 1.
func FileProfile(f workload.File) Profile {
	fleet := experiment.DefaultConfig()
	fleet.Router = experiment.EnvoyRouter()
	fleet.Workload = f.Config
	if n := f.Fleet.Engines; n > 0 {
		fleet.Engines = n
		fleet.Slowdowns = fleet.Slowdowns[:min(n, len(fleet.Slowdowns))]
	}
	if f.Fleet.Slowdowns != nil {
		fleet.Slowdowns = f.Fleet.Slowdowns
	}
	if f.Fleet.KVPoolTokens > 0 {
		fleet.Engine.KVPoolTokens = f.Fleet.KVPoolTokens
	}
	about := "the workload file " + f.Name
	if f.Source != "" {
		about += " (" + strings.TrimRight(f.Source, ". ") + ")"
	}
	return Profile{Name: f.Name, About: about, Fleet: fleet}
}

// TraceProfile is a trace as a profile named name on fleet (its router set
// to Envoy, its workload to one with no prefix pool, so no warm-up runs, as
// for the novel profile): windows consecutive equal windows of recs, each
// selected with o (o.Window is ignored), are its seeds 1..windows. A window
// with no request is an error.
func TraceProfile(name string, recs []trace.Record, windows int, o trace.Options, fleet experiment.Config) (Profile, error) {
	if !(o.Speedup > 0) || math.IsInf(o.Speedup, 0) {
		return Profile{}, fmt.Errorf("speed-up %v: pass a positive number (1 replays at the recorded pace)", o.Speedup)
	}
	ws, err := trace.Windows(recs, windows)
	if err != nil {
		return Profile{}, err
	}
	tr := &TraceReplay{Records: recs, Windows: ws, Options: o}
	var all []trace.Request
	for i, w := range ws {
		o.Window = w
		sel, err := trace.Select(recs, o)
		if err != nil {
			return Profile{}, fmt.Errorf("window %d of %d [%v, %v) has no request that fits the %d-token context (%d dropped): pass fewer windows", i+1, windows, w.From, w.To, o.Context, sel.Dropped)
		}
		tr.Requests += len(sel.Requests)
		tr.Capped += sel.Capped
		all = append(all, sel.Requests...)
	}
	tr.Reuse = trace.ReuseCeiling(all)
	fleet.Router = experiment.EnvoyRouter()
	fleet.Workload.Profile = workload.ProfileNovel
	about := fmt.Sprintf("the trace %s replayed in %d consecutive windows, each a paired seed", name, windows)
	return Profile{Name: name, About: about, Fleet: fleet, Trace: tr}, nil
}

// traceSeeds returns seeds as the trace's windows, each window's requests
// selected and built when the cell reaches it.
func traceSeeds(tr *TraceReplay, seeds []uint64) ([]vtime.CellSeed, error) {
	out := make([]vtime.CellSeed, len(seeds))
	for i, s := range seeds {
		if s < 1 || s > uint64(len(tr.Windows)) {
			return nil, fmt.Errorf("seed %d: the trace has windows 1-%d only: pass -windows and no other seeds", s, len(tr.Windows))
		}
		o := tr.Options
		o.Window = tr.Windows[s-1]
		out[i] = vtime.CellSeed{Seed: s, Generate: func() ([]workload.Request, error) {
			sel, err := trace.Select(tr.Records, o)
			if err != nil {
				return nil, err
			}
			return workload.FromTrace(sel, false), nil
		}}
	}
	return out, nil
}

// traceText describes a trace profile's load in one clause.
func traceText(tr *TraceReplay) string {
	o := tr.Options
	span := tr.Windows[0].To - tr.Windows[0].From
	s := fmt.Sprintf("%d windows of %v of trace time at speed-up %g, %d requests in all", len(tr.Windows), span, o.Speedup, tr.Requests)
	if o.MaxRequests > 0 {
		s += fmt.Sprintf(" (at most %d per window)", o.MaxRequests)
	}
	return s + fmt.Sprintf(", %d prompts capped to the %d-token context, reuse ceiling %.1f%% of prompt tokens", tr.Capped, o.Context, 100*tr.Reuse.Fraction())
}
