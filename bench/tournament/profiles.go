package tournament

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
)

// Profile is one workload on one fleet: a vtime fleet (engines, per-engine
// speeds, engine model, seed gap, hash seed) and a workload. Fleet.Arms,
// Seeds, Protocol, Warmup and Workers are not used: the tournament supplies
// the arms and seeds and runs the published cell protocol; Fleet.Router is
// always experiment.EnvoyRouter().
type Profile struct {
	Name  string
	About string // one sentence for the report
	Fleet experiment.Config
	// Replayed: the seeds are the embedded capture's measured seeds (the
	// published kvaware cell's prefix sequences and send offsets), not
	// generated from Fleet.Workload; only their first Fleet.Workload.Requests
	// requests run.
	Replayed bool
	// Trace, when set, replaces Fleet.Workload's generated seeds: seed s is
	// the trace's window s (see TraceProfile).
	Trace *TraceReplay
}

// PerEngineRate is the request rate per engine of the scaled fleets: the
// published 16 req/s on 2 engines.
const PerEngineRate = 8

// perEngineRequests keeps a scaled fleet's seed as long as the published
// one (500 requests at 16 req/s, about 31 s): 250 requests per engine.
const perEngineRequests = 250

// Profiles returns the default profiles, in report order. Each call returns
// fresh values the caller may modify.
func Profiles() []Profile {
	base := func() experiment.Config {
		c := experiment.DefaultConfig()
		c.Router = experiment.EnvoyRouter()
		return c
	}
	published := base()
	rate := func(r float64) experiment.Config {
		c := base()
		c.Workload.Rate = r
		return c
	}
	burst := base()
	burst.Workload.BurstEvery, burst.Workload.BurstLen, burst.Workload.BurstFactor = 30*time.Second, 5*time.Second, 3
	smallcache := base()
	smallcache.Engine.CPUTierBytes = 0
	smallcache.Engine.KVPoolTokens /= 2
	smallcache.Workload.Rate = SmallCacheRate
	novel := base()
	novel.Workload.Profile = workload.ProfileNovel
	novel.Workload.Rate = NovelRate
	chat := base()
	chat.Workload.Profile = workload.ProfileChat
	chat.Workload.Rate = ChatRate
	long := base()
	long.Workload.Prefixes, long.Workload.PrefixTokens, long.Workload.PrefixTokensMax = LongPrefixes, 8192, 32768
	long.Workload.Rate, long.Workload.Requests = LongRate, LongRequests
	return append([]Profile{
		{Name: "published", About: "the published workload replayed: the measured seeds' prefix sequences and send offsets (the gen2 kvaware cell) on the calibrated 2-engine fleet", Fleet: published, Replayed: true},
		{Name: "rate20", About: "the published workload generated at 20 req/s", Fleet: rate(20)},
		{Name: "rate24", About: "the published workload generated at 24 req/s", Fleet: rate(24)},
		{Name: "burst", About: "the published workload at the same mean rate, with 5 s bursts at 3x the base rate every 30 s", Fleet: burst},
		{Name: "fleet4", About: "4 engines, the calibrated fast/slow pair twice (1, 1.3, 1, 1.3), 8 req/s per engine", Fleet: scaled(base(), []float64{1, 1.3, 1, 1.3})},
		{Name: "fleet8", About: "8 engines spread evenly from 1.0x to 1.5x step time, 8 req/s per engine", Fleet: scaled(base(), spread(8, 1, 1.5))},
		{Name: "smallcache", About: fmt.Sprintf("the published prefixes at %g req/s on engines with no LMCache CPU tier and half the GPU KV pool (without a CPU tier no LMCache event reaches the picker: cache-aware arms route blind)", SmallCacheRate), Fleet: smallcache},
		{Name: "novel", About: fmt.Sprintf("every prompt unique (2,048 + 32 tokens) at %g req/s: the cache path's cost with no benefit", NovelRate), Fleet: novel},
		{Name: "chat", About: fmt.Sprintf("multi-turn chat sessions at %g req/s whose prompts grow turn by turn: a system prompt from the published pool, each turn adding the reply and a new user message", ChatRate), Fleet: chat},
		{Name: "long", About: fmt.Sprintf("long shared prefixes: %d prefixes of 8k-32k tokens at %g req/s", LongPrefixes, LongRate), Fleet: long},
	}, shippedProfiles()...)
}

// DefaultWorkloads are the shipped workload files (the public suites) the
// default tournament runs after its own profiles, each on its file's fleet
// (docs/decisions/1553-public-suites-in-the-default-tournament.md). The
// code-generation catalog is left out: its 32k-token prompts cost more than
// all the others together.
var DefaultWorkloads = []string{"b2b-saas-high-cache", "b2b-saas-low-cache", "llmd-precise-doe-60x8k", "aibrix-prefix-repetition",
	"dynamo-prefix-ratio-0.5", "prodstack-multi-round-qa", "inference-perf-reasoning"}

// shippedProfiles returns DefaultWorkloads as profiles. The files are
// embedded and their tests parse every one, so a failure here is a broken
// build, not bad input.
func shippedProfiles() []Profile {
	out := make([]Profile, len(DefaultWorkloads))
	for i, name := range DefaultWorkloads {
		f, err := workload.Resolve(name)
		if err != nil {
			panic(fmt.Sprintf("tournament: the shipped workload %s does not load: %v", name, err))
		}
		out[i] = FileProfile(f)
	}
	return out
}

// ExtraProfiles returns the profiles run only when named (SelectProfiles):
// those of features the default profiles do not exercise.
//
//   - lora: the published prompts on the fleet4 engines serving 8 LoRA
//     adapters, prefix k belonging to adapter k mod 8 (so the adapters'
//     popularity follows the prefixes' Zipf 0.9: 23% of the requests for the
//     first, 9% for the last), each engine running at most LoRASlots adapters
//     at once and activating one in AdapterLoad (docs/decisions/0820).
//   - dp: the published prompts on DPEngines engines (step factors 1 and 1.3)
//     of DPRanks data-parallel ranks each behind one port, at PerEngineRate
//     per rank; the picker learns the caches from vLLM's KV events, which
//     name the rank (arms ending in +ranks tell the ranks apart;
//     docs/decisions/0830).
//   - dp-replicas: dp routed by DPPickers picker replicas in turn, each
//     seeing the others' bookings per endpoint (instant gossip) but only its
//     own per rank: what the engines' per-rank metrics make up for
//     (docs/decisions/0831).
func ExtraProfiles() []Profile {
	lora := scaled(experiment.DefaultConfig(), []float64{1, 1.3, 1, 1.3})
	lora.Router = experiment.EnvoyRouter()
	lora.Workload.Adapters = LoRAAdapters
	lora.Workload.Rate = LoRARate
	lora.Engine.MaxLoRAs, lora.Engine.AdapterLoad = LoRASlots, LoRAAdapterLoad
	lora.AdapterCost = picker.DefaultAdapterCost
	dp := scaled(experiment.DefaultConfig(), []float64{1, 1.3})
	dp.Router = experiment.EnvoyRouter()
	dp.DPRanks = DPRanks
	dp.Workload.Rate = PerEngineRate * DPEngines * DPRanks
	dp.Workload.Requests = perEngineRequests * DPEngines * DPRanks
	dp.CacheSource = picker.SourceVLLMEvents
	dpReplicas := dp
	dpReplicas.Pickers = DPPickers
	return []Profile{
		{Name: "dp", About: fmt.Sprintf("the published prompts on %d engines of %d data-parallel ranks behind one port each (step factors 1 and 1.3), %d req/s per rank, the caches learnt from vLLM's KV events", DPEngines, DPRanks, PerEngineRate), Fleet: dp},
		{Name: "dp-replicas", About: fmt.Sprintf("dp routed by %d picker replicas in turn, sharing their endpoint loads at once but not their ranks'", DPPickers), Fleet: dpReplicas},
		{Name: "lora", About: fmt.Sprintf("the published prompts for %d LoRA adapters (prefix k is adapter k mod %d) at %g req/s on the fleet4 engines, each running at most %d adapters at once", LoRAAdapters, LoRAAdapters, LoRARate, LoRASlots), Fleet: lora},
	}
}

// The lora profile's fleet and load (docs/decisions/0820).
const (
	LoRAAdapters    = 8
	LoRASlots       = 2                    // vLLM --max-loras
	LoRAAdapterLoad = 5 * time.Millisecond // a rank-16 adapter of every linear layer, 60 MB over PCIe
	LoRARate        = 16.0                 // req/s on the four engines
)

// The dp profile's fleet (docs/decisions/0830).
const (
	DPEngines = 2 // servers, one port each
	DPRanks   = 4 // data-parallel ranks per server (vllm serve --data-parallel-size 4)
	DPPickers = 2 // picker replicas of the dp-replicas profile
)

// The rates of the profiles whose prompts cost more prefill than the
// published one (docs/decisions/1311-tournament-profiles.md says how they
// were chosen).
const (
	NovelRate      = 2.0 // req/s of 2,080-token unique prompts
	ChatRate       = 6.0 // req/s of chat turns
	SmallCacheRate = 6.0 // req/s of the published workload on the small cache
	LongRate       = 2.5 // req/s of 8k-32k-token prefixes
	LongPrefixes   = 12  // prefixes in the long profile's pool
	LongRequests   = 200 // requests per seed of the long profile
)

// scaled is cfg with one engine per slowdown and the rate and requests per
// seed scaled with the fleet.
func scaled(cfg experiment.Config, slowdowns []float64) experiment.Config {
	cfg.Engines, cfg.Slowdowns = len(slowdowns), slowdowns
	cfg.Workload.Rate = PerEngineRate * float64(len(slowdowns))
	cfg.Workload.Requests = perEngineRequests * len(slowdowns)
	return cfg
}

// spread returns n factors evenly spaced from lo to hi.
func spread(n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Round((lo+(hi-lo)*float64(i)/float64(n-1))*1e4) / 1e4
	}
	return out
}

// ProfileNames lists the default profiles' names, in report order.
func ProfileNames() []string {
	var out []string
	for _, p := range Profiles() {
		out = append(out, p.Name)
	}
	return out
}

// ExtraNames lists the extra profiles' names.
func ExtraNames() []string {
	var out []string
	for _, p := range ExtraProfiles() {
		out = append(out, p.Name)
	}
	return out
}

// SelectProfiles returns the profiles named in names (in that order), among
// the default and the extra ones; an empty list selects the default ones.
// Unknown or repeated names are an error that lists the known ones.
func SelectProfiles(names []string) ([]Profile, error) {
	all := Profiles()
	if len(names) == 0 {
		return all, nil
	}
	all = append(all, ExtraProfiles()...)
	var out []Profile
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("profile %q named twice", n)
		}
		seen[n] = true
		found := false
		for _, p := range all {
			if p.Name == n {
				out, found = append(out, p), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown profile %q: use %s", n, strings.Join(append(ProfileNames(), ExtraNames()...), ", "))
		}
	}
	return out, nil
}

// DefaultBetas are loadaware's arms: the published betas.
var DefaultBetas = []float64{0, 0.5, 1, 2}

// DefaultArms returns every policy scoring knows (scoring.Names, in its
// order) except "session", which needs a session key the workloads do not
// carry, with loadaware expanded into one arm per DefaultBetas
// ("loadaware-b0" ... "loadaware-b2"), and then the gie arm (GIE v1.5.0's own
// scheduler, experiment.PolicyGIE). Policies added to scoring appear here by
// themselves.
func DefaultArms() []experiment.Arm {
	var out []experiment.Arm
	for _, name := range scoring.Names {
		switch name {
		case "session":
			continue
		case "loadaware":
			for _, b := range DefaultBetas {
				out = append(out, experiment.Arm{Name: "loadaware-b" + strconv.FormatFloat(b, 'g', -1, 64), Policy: name, Beta: b})
			}
			continue
		}
		out = append(out, experiment.Arm{Name: name, Policy: name, Beta: scoring.DefaultParams().Beta})
	}
	return append(out, experiment.Arm{Name: experiment.PolicyGIE, Policy: experiment.PolicyGIE})
}
