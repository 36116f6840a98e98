package tournament

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// The held-out check runs profiles nobody tuned on: shapes drawn at random,
// from a seed fixed before any run, out of the space HoldoutSpace declares
// (docs/decisions/1620-held-out-random-shapes.md says why each bound). Each
// shape is the shared or the chat workload of bench/workload on the
// calibrated engine model of bench/sim; nothing here models an engine.

// HoldoutSpace declares the space DrawShapes draws from, as the report
// prints it; every bound is a constant below.
const HoldoutSpace = `Each parameter is drawn independently per shape:

- fleet: 2-8 engines (uniform); their step-time factors from one mix drawn among {1}, {1, 1.3}, {1, 1.6} and {1, 1.3, 1.6}, each engine's factor uniform in its mix;
- GPU KV pool per engine: log-uniform in 16,384-393,216 tokens (an A10 with Qwen2.5-3B holds about 99,000 at gpu_memory_utilization 0.45 and 390,000 at 0.9), raised to twice the longest sequence the shape sends;
- LMCache CPU tier: none with probability 1/2, else 1, 2, 4, 8 or 16 GiB (uniform);
- prefixes: 1-200 (log-uniform), each 200-16,000 tokens: the shortest log-uniform in 200-16,000 and, with probability 1/2, the lengths drawn per prefix up to a longest log-uniform between the shortest and 16,000;
- popularity: uniform with probability 1/3, else Zipf with s uniform in 0.6-1.2;
- suffix (or user message) 32-2,048 tokens and output 16-1,024 tokens, both log-uniform;
- multi-turn growth with probability 1/4: chat sessions of 2-8 turns (fewer when the longest prompt would pass the 32,768-token context) with a mean think time uniform in 2-10 s, each turn's prompt the previous one plus the reply and a new user message;
- arrivals: Poisson or, for single-turn shapes with probability 1/3, bursts of 2-10 s at 2-4x the base rate every 10-40 s at the same mean rate;
- offered load: uniform in 20-110% of the fleet's capacity as the knee report measures it (leastload, which prefers no cache, offered 48 req/s per engine), so cache-aware arms may still keep up at 110%;
- 150 requests per engine per seed.
`

// DefaultHoldoutSeed is the held-out draw's seed, fixed on 6 December 2026
// before any held-out profile was run (-holdout-seed).
const DefaultHoldoutSeed = 20261206

// MaxHoldout bounds the profiles one draw makes (-holdout).
const MaxHoldout = 99

// HoldoutRequestsPerEngine is each held-out seed's length per engine.
const HoldoutRequestsPerEngine = 150

// HoldoutContext is the longest sequence (prompt plus output) a held-out
// shape sends: Qwen2.5-3B's 32,768-token context.
const HoldoutContext = 32768

// The space's bounds (see the package comment above).
const (
	holdoutMinEngines, holdoutMaxEngines = 2, 8
	holdoutMinPool, holdoutMaxPool       = 16384, 393216
	holdoutMaxPrefixes                   = 200
	holdoutMinPrefix, holdoutMaxPrefix   = 200, 16000
	holdoutMinSuffix, holdoutMaxSuffix   = 32, 2048
	holdoutMinOutput, holdoutMaxOutput   = 16, 1024
	holdoutMinLoad, holdoutMaxLoad       = 0.2, 1.1
	holdoutMinTurns, holdoutMaxTurns     = 2, 8
)

// holdoutMixes are the step-time factor mixes a fleet draws from.
var holdoutMixes = [][]float64{{1}, {1, 1.3}, {1, 1.6}, {1, 1.3, 1.6}}

// holdoutCPUGiB are the CPU tier sizes a shape with a tier draws from.
var holdoutCPUGiB = []int64{1, 2, 4, 8, 16}

// Shape is one held-out profile's drawn parameters.
type Shape struct {
	Slowdowns       []float64 // one step-time factor per engine
	KVPoolTokens    int       // each engine's GPU KV pool
	CPUTierBytes    int64     // each engine's LMCache CPU tier (0: none)
	Prefixes        int       // shared prefixes (chat: system prompts)
	PrefixTokens    int       // the shortest prefix
	PrefixTokensMax int       // 0: every prefix is PrefixTokens long; else the longest
	ZipfS           float64   // 0: uniform popularity
	SuffixTokens    int       // each request's unique suffix (chat: each user message)
	OutputTokens    int       // max_tokens (chat: each reply too)
	Turns           int       // 0: single requests; else chat sessions of Turns turns
	ThinkTime       time.Duration
	BurstEvery      time.Duration // 0: Poisson arrivals
	BurstLen        time.Duration
	BurstFactor     float64
	Load            float64 // offered rate over the fleet's measured capacity
}

// DrawShapes returns n shapes drawn from the space from seed. Shape i
// depends on seed and i only, so a longer draw begins with a shorter one.
func DrawShapes(seed uint64, n int) []Shape {
	out := make([]Shape, n)
	for i := range out {
		out[i] = drawShape(rand.New(rand.NewPCG(seed, 0x686f6c64+uint64(i))))
	}
	return out
}

func drawShape(rng *rand.Rand) Shape {
	var s Shape
	mix := holdoutMixes[rng.IntN(len(holdoutMixes))]
	s.Slowdowns = make([]float64, holdoutMinEngines+rng.IntN(holdoutMaxEngines-holdoutMinEngines+1))
	for i := range s.Slowdowns {
		s.Slowdowns[i] = mix[rng.IntN(len(mix))]
	}
	pool := logUniform(rng, holdoutMinPool, holdoutMaxPool)
	if rng.IntN(2) == 1 {
		s.CPUTierBytes = holdoutCPUGiB[rng.IntN(len(holdoutCPUGiB))] << 30
	}
	s.Prefixes = logUniform(rng, 1, holdoutMaxPrefixes)
	s.PrefixTokens = logUniform(rng, holdoutMinPrefix, holdoutMaxPrefix)
	if rng.IntN(2) == 1 {
		s.PrefixTokensMax = logUniform(rng, s.PrefixTokens, holdoutMaxPrefix)
	}
	if rng.IntN(3) != 0 {
		s.ZipfS = round3(0.6 + 0.6*rng.Float64())
	}
	s.SuffixTokens = logUniform(rng, holdoutMinSuffix, holdoutMaxSuffix)
	s.OutputTokens = logUniform(rng, holdoutMinOutput, holdoutMaxOutput)
	if rng.IntN(4) == 0 {
		longest := max(s.PrefixTokens, s.PrefixTokensMax)
		fit := (HoldoutContext - longest - s.OutputTokens) / (s.SuffixTokens + s.OutputTokens + 2)
		if turns := min(holdoutMinTurns+rng.IntN(holdoutMaxTurns-holdoutMinTurns+1), fit); turns >= holdoutMinTurns {
			s.Turns = turns
		}
		s.ThinkTime = time.Duration(math.Round((2+8*rng.Float64())*10)) * 100 * time.Millisecond
	}
	if s.Turns == 0 {
		s.ThinkTime = 0
		if rng.IntN(3) == 0 {
			s.BurstEvery = time.Duration(10+rng.IntN(31)) * time.Second
			// A burst must end before the next one starts: a 10 s draw in a
			// 10 s period is one second shorter (no other draw changes).
			s.BurstLen = min(time.Duration(2+rng.IntN(9))*time.Second, s.BurstEvery-time.Second)
			s.BurstFactor = round3(2 + 2*rng.Float64())
		}
	}
	s.Load = round3(holdoutMinLoad + (holdoutMaxLoad-holdoutMinLoad)*rng.Float64())
	s.KVPoolTokens = max(pool, 2*s.longest())
	s.KVPoolTokens = (s.KVPoolTokens + 15) / 16 * 16
	return s
}

// logUniform returns an integer in lo..hi whose logarithm is uniform.
func logUniform(rng *rand.Rand, lo, hi int) int {
	x := math.Exp(math.Log(float64(lo)) + (math.Log(float64(hi)+1)-math.Log(float64(lo)))*rng.Float64())
	return min(hi, max(lo, int(x)))
}

// longest is the longest sequence (prompt and output) the shape sends.
func (s Shape) longest() int {
	n := max(s.PrefixTokens, s.PrefixTokensMax) + 1 + s.SuffixTokens + s.OutputTokens
	if s.Turns > 0 {
		n += (s.Turns - 1) * (s.SuffixTokens + s.OutputTokens + 2)
	}
	return n
}

// Fleet returns the shape as a fleet and workload at rate req/s, behind
// Envoy: the calibrated engine model with the shape's engines, pools and
// tier, and the shared workload (chat with Turns) with its prompts.
func (s Shape) Fleet(rate float64) experiment.Config {
	c := experiment.DefaultConfig()
	c.Router = experiment.EnvoyRouter()
	c.Engines, c.Slowdowns = len(s.Slowdowns), s.Slowdowns
	c.Engine.KVPoolTokens, c.Engine.CPUTierBytes = s.KVPoolTokens, s.CPUTierBytes
	w := &c.Workload
	w.Requests, w.Rate = HoldoutRequestsPerEngine*len(s.Slowdowns), rate
	w.Prefixes, w.PrefixTokens, w.PrefixTokensMax, w.ZipfS = s.Prefixes, s.PrefixTokens, s.PrefixTokensMax, s.ZipfS
	w.SuffixTokens, w.MaxTokens = s.SuffixTokens, s.OutputTokens
	if s.Turns > 0 {
		w.Profile, w.Turns, w.ThinkTime, w.UserTokens = workload.ProfileChat, s.Turns, s.ThinkTime, s.SuffixTokens
	}
	w.BurstEvery, w.BurstLen, w.BurstFactor = s.BurstEvery, s.BurstLen, s.BurstFactor
	if s.BurstEvery == 0 {
		d := workload.DefaultConfig()
		w.BurstLen, w.BurstFactor = d.BurstLen, d.BurstFactor
	}
	return c
}

// Text describes the shape's features in one clause, for the report.
func (s Shape) Text() string {
	var parts []string
	mix := map[float64]bool{}
	for _, f := range s.Slowdowns {
		mix[f] = true
	}
	parts = append(parts, fmt.Sprintf("%d engines", len(s.Slowdowns)))
	if len(mix) == 1 {
		parts = append(parts, "one speed")
	} else {
		parts = append(parts, "mixed speeds")
	}
	ws := s.Prefixes * (s.PrefixTokens + max(s.PrefixTokens, s.PrefixTokensMax)) / 2
	parts = append(parts, fmt.Sprintf("prefix working set about %s tokens, %.2fx one engine's GPU pool", thousands(ws), float64(ws)/float64(s.KVPoolTokens)))
	if s.CPUTierBytes == 0 {
		parts = append(parts, "no CPU tier")
	} else {
		parts = append(parts, fmt.Sprintf("%d GiB CPU tier", s.CPUTierBytes>>30))
	}
	if s.ZipfS == 0 {
		parts = append(parts, "uniform popularity")
	} else {
		parts = append(parts, fmt.Sprintf("Zipf %g", s.ZipfS))
	}
	parts = append(parts, fmt.Sprintf("%d-token suffixes", s.SuffixTokens))
	switch {
	case s.Turns > 0:
		parts = append(parts, fmt.Sprintf("chat of %d turns growing by %d tokens a turn", s.Turns, s.SuffixTokens+s.OutputTokens+2))
	case s.BurstEvery > 0:
		parts = append(parts, "bursty")
	default:
		parts = append(parts, "Poisson")
	}
	return strings.Join(parts, ", ")
}

// thousands writes n with commas: 1,544.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// holdoutOffered is the capacity run's offered rate per engine: above what
// any engine can complete, since every admission costs at least the model's
// AdmitOverhead (25 ms: at most 40 req/s), so Capacity never finds the fleet
// keeping up.
var holdoutOffered = 1.2 / sim.DefaultConfig().AdmitOverhead.Seconds()

// HoldoutName is the name of the i-th (0-based) held-out profile.
func HoldoutName(i int) string { return fmt.Sprintf("h%02d", i+1) }

// HoldoutProfiles returns n profiles drawn from seed (DrawShapes), named
// HoldoutName, each at its shape's Load times its fleet's capacity
// (Capacity, offered holdoutOffered per engine), rounded to 3 significant
// digits. n must be 1..MaxHoldout.
func HoldoutProfiles(ctx context.Context, seed uint64, n int, sample time.Duration) ([]Profile, error) {
	if n < 1 || n > MaxHoldout {
		return nil, fmt.Errorf("%d held-out profiles: draw 1..%d", n, MaxHoldout)
	}
	out := make([]Profile, n)
	for i, s := range DrawShapes(seed, n) {
		p, err := holdoutProfile(ctx, seed, i, s, HoldoutRequestsPerEngine, sample)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// holdoutProfile is shape s, the i-th of seed's draw, as a profile of
// perEngine requests per engine and seed, at s.Load times its capacity.
func holdoutProfile(ctx context.Context, seed uint64, i int, s Shape, perEngine int, sample time.Duration) (Profile, error) {
	p := Profile{Name: HoldoutName(i), Fleet: s.Fleet(1)}
	p.Fleet.Workload.Requests = perEngine * len(s.Slowdowns)
	capacity, err := Capacity(ctx, p, holdoutOffered*float64(len(s.Slowdowns)), sample)
	if err != nil {
		return Profile{}, fmt.Errorf("held-out profile %s (seed %d): %w", p.Name, seed, err)
	}
	p.Fleet.Workload.Rate = round3(s.Load * capacity)
	p.About = fmt.Sprintf("held-out shape %d of seed %d: %s; offered %.0f%% of the fleet's measured capacity of %.3g req/s", i+1, seed, s.Text(), 100*s.Load, capacity)
	return p, nil
}
