// Package workload generates the benchmark's requests: the published
// shared-prefix workload (a fixed pool of 128 prefixes chosen by Zipf s = 0.9,
// a unique suffix per request, open-loop Poisson arrivals), the "novel"
// profile (every prompt unique) and the "chat" profile (multi-turn sessions
// whose prompts grow turn by turn). Arrivals may come in bursts at the same
// mean rate, and prefixes may vary in length (long prompts).
//
// Generation is pure and deterministic: the prefix pool depends only on
// Config.PoolSeed, and a seed fixes the request order, the suffixes and the
// arrival times. Requests carry both the prompt text and its token ids in a
// small synthetic vocabulary (one id per filler word, one per tag character
// group), so the simulator and the picker can compare token prefixes without a
// tokenizer; the text is there for a live run that sends text.
//
// The package does no I/O and reads no clocks.
package workload

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Profiles.
const (
	ProfileShared = "shared" // the published workload: shared prefixes, Zipf popularity
	ProfileNovel  = "novel"  // every prompt unique: the cache path's cost with no benefit
	ProfileChat   = "chat"   // multi-turn sessions: a system prompt from the pool, prompts growing turn by turn
	ProfileGroups = "groups" // inference-perf's shared_prefix: groups x prompts per group, sent in turn (see generateGroups)
	// ProfileConversations is inference-perf's conversation_replay: multi-turn
	// conversations with drawn lengths and tool latencies (see conversations.go).
	ProfileConversations = "conversations"
)

// Config is every parameter of the workload. DefaultConfig is the published
// experiment.
type Config struct {
	Profile           string  // ProfileShared, ProfileNovel or ProfileChat
	Requests          int     // requests per seed
	Rate              float64 // mean arrival rate, requests per second (Poisson)
	Prefixes          int     // distinct prefixes in the pool (shared and chat profiles: the system prompts)
	ZipfS             float64 // Zipf exponent: p(rank k) proportional to 1/k^s
	PrefixTokens      int     // tokens per prefix, tag included (shared and chat profiles); the least when PrefixTokensMax is set
	PrefixTokensMax   int     // 0: every prefix has PrefixTokens; else each prefix's length is drawn uniformly from PrefixTokens..PrefixTokensMax by the pool seed
	SuffixTokens      int     // tokens per suffix, tag included (shared profile)
	NovelPrefixTokens int     // tokens of the unique body (novel profile)
	NovelSuffixTokens int     // tokens of the suffix (novel profile)
	MaxTokens         int     // completion tokens requested (max_tokens); in the chat profile also each assistant reply's length
	PoolSeed          uint64  // fixes the prefix pool; never varies between seeds

	// Bursts (shared and novel profiles; see warp): 0 BurstEvery = none.
	BurstEvery  time.Duration // period of the bursts
	BurstLen    time.Duration // length of each burst, at the start of its period
	BurstFactor float64       // arrival rate in a burst over the base rate between bursts

	// Chat sessions (chat profile; see generateChat).
	Turns      int           // requests per session
	ThinkTime  time.Duration // mean time between a session's turns (each uniform in 0.5-1.5x)
	UserTokens int           // tokens of each user message, tag included

	// Groups (groups profile; see generateGroups).
	PromptsPerGroup int // prompts per group, each the group's system prompt (a pool prefix) and a question of SuffixTokens

	// Adapters (shared profile): 0 = every request is for the base model; else prefix k
	// belongs to LoRA adapter k mod Adapters (AdapterName), so each adapter has its own
	// prompts and the adapters' popularity follows the prefixes' Zipf law.
	Adapters int
	// Conversations (conversations profile; see conversations.go).
	Conversations int  // conversations, each sending its turns in order
	SystemTokens  Dist // tokens of each conversation's dynamic system prompt, after its shared one (a pool prefix)
	TurnCount     Dist // turns per conversation
	InputTokens   Dist // tokens of each turn's user input
	OutputTokens  Dist // tokens of each turn's answer (max_tokens)
	ToolLatency   Dist // seconds between a conversation's turns, besides the fixed wait that sets the rate
	Context       int  // the engines' context, tokens: a longer prompt plus answer is cut (conversations profile)
}

// DefaultConfig returns the published workload: 500 requests per seed at
// 16 req/s, 128 prefixes of 1,544 tokens under Zipf 0.9, 34-token suffixes,
// 64 output tokens, no bursts. Its burst and chat parameters (5 s at 3x,
// when a period is set; 6 turns 8 s apart with 96-token user messages) take
// effect only when bursts or the chat profile are asked for.
func DefaultConfig() Config {
	return Config{
		Profile:           ProfileShared,
		Requests:          500,
		Rate:              16,
		Prefixes:          128,
		ZipfS:             0.9,
		PrefixTokens:      1544,
		SuffixTokens:      34,
		NovelPrefixTokens: 2048,
		NovelSuffixTokens: 32,
		MaxTokens:         64,
		PoolSeed:          20250901,
		BurstLen:          5 * time.Second,
		BurstFactor:       3,
		Turns:             6,
		ThinkTime:         8 * time.Second,
		UserTokens:        96,
		PromptsPerGroup:   5,
		// inference-perf's code-generation catalog (conversations.go).
		Conversations: 40,
		SystemTokens:  Dist{Kind: DistLognormal, Min: 10000, Max: 990000, Mean: 160000, Std: 233600},
		TurnCount:     Dist{Kind: DistLognormal, Min: 1, Max: 3000, Mean: 540, Std: 48600},
		InputTokens:   Dist{Kind: DistLognormal, Min: 100, Max: 10000, Mean: 1500, Std: 1200},
		OutputTokens:  Dist{Kind: DistLognormal, Min: 50, Max: 10000, Mean: 425, Std: 825},
		ToolLatency:   Dist{Kind: DistLognormal, Min: 1, Max: 100, Mean: 15, Std: 55},
		Context:       32768,
	}
}

// HasPool reports whether the profile draws its prompts from the shared
// prefix pool (the shared and chat profiles): the published warm-up warms
// that pool.
func (c Config) HasPool() bool {
	return c.Profile == ProfileShared || c.Profile == ProfileChat || c.Profile == ProfileGroups || c.Profile == ProfileConversations
}

// RegisterFlags registers one flag per field on fs, with c's current values
// as defaults; parsing fs writes into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Profile, "profile", c.Profile, "workload profile: shared (published prefixes, Zipf), novel (every prompt unique), chat (multi-turn sessions on a system prompt from the pool), groups (inference-perf shared_prefix: -prefixes groups x -prompts-per-group prompts, sent in turn) or conversations (inference-perf conversation_replay: -conversations with drawn lengths and tool latencies)")
	fs.IntVar(&c.Requests, "requests", c.Requests, "requests per seed")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "open-loop Poisson arrival rate, requests per second")
	fs.IntVar(&c.Prefixes, "prefixes", c.Prefixes, "distinct shared prefixes in the pool")
	fs.Float64Var(&c.ZipfS, "zipf", c.ZipfS, "Zipf exponent s of prefix popularity (p(k) ~ 1/k^s)")
	fs.IntVar(&c.PrefixTokens, "prefix-tokens", c.PrefixTokens, "tokens per shared prefix, tag included (the least, with -prefix-tokens-max)")
	fs.IntVar(&c.PrefixTokensMax, "prefix-tokens-max", c.PrefixTokensMax, "0: every prefix has -prefix-tokens; else each prefix's length is drawn from -prefix-tokens..this by the pool seed")
	fs.IntVar(&c.SuffixTokens, "suffix-tokens", c.SuffixTokens, "tokens per unique suffix, tag included")
	fs.IntVar(&c.NovelPrefixTokens, "novel-prefix-tokens", c.NovelPrefixTokens, "unique body tokens per prompt in the novel profile")
	fs.IntVar(&c.NovelSuffixTokens, "novel-suffix-tokens", c.NovelSuffixTokens, "suffix tokens per prompt in the novel profile")
	fs.IntVar(&c.MaxTokens, "max-tokens", c.MaxTokens, "completion tokens per request (max_tokens)")
	fs.Uint64Var(&c.PoolSeed, "pool-seed", c.PoolSeed, "seed of the prefix pool (never varies between seeds)")
	fs.DurationVar(&c.BurstEvery, "burst-every", c.BurstEvery, "period of arrival bursts at the same mean rate (0: none)")
	fs.DurationVar(&c.BurstLen, "burst-len", c.BurstLen, "length of each burst, at the start of its period")
	fs.Float64Var(&c.BurstFactor, "burst-factor", c.BurstFactor, "arrival rate in a burst over the base rate between bursts")
	fs.IntVar(&c.Turns, "turns", c.Turns, "chat profile: requests per session")
	fs.DurationVar(&c.ThinkTime, "think-time", c.ThinkTime, "chat profile: mean time between a session's turns (open loop: each uniform in 0.5-1.5x)")
	fs.IntVar(&c.UserTokens, "user-tokens", c.UserTokens, "chat profile: tokens of each user message, tag included")
	fs.IntVar(&c.Adapters, "adapters", c.Adapters, "shared profile: LoRA adapters the requests are for (prefix k belongs to adapter k mod this); 0: the base model only")
	fs.IntVar(&c.PromptsPerGroup, "prompts-per-group", c.PromptsPerGroup, "groups profile: prompts per group, each the group's system prompt (-prefix-tokens) and its own question (-suffix-tokens)")
	fs.IntVar(&c.Conversations, "conversations", c.Conversations, "conversations profile: conversations, each sending its turns in order (its shared system prompt a pool prefix)")
	fs.Var(distFlag{&c.SystemTokens}, "system-tokens", `conversations profile: tokens of each conversation's dynamic system prompt, a distribution such as "lognormal min=10000 max=990000 mean=160000 std=233600" (kinds fixed, uniform, normal, lognormal, exponential)`)
	fs.Var(distFlag{&c.TurnCount}, "turn-count", "conversations profile: turns per conversation, a distribution")
	fs.Var(distFlag{&c.InputTokens}, "input-tokens", "conversations profile: tokens of each turn's user input, a distribution")
	fs.Var(distFlag{&c.OutputTokens}, "output-tokens", "conversations profile: tokens of each turn's answer (max_tokens), a distribution")
	fs.Var(distFlag{&c.ToolLatency}, "tool-latency", "conversations profile: seconds between a conversation's turns besides the wait that sets -rate, a distribution")
	fs.IntVar(&c.Context, "context", c.Context, "conversations profile: the engines' context in tokens; a longer prompt plus answer is cut (answer to half the context, then the prompt's tail) and counted")
}

// Validate reports the first unusable parameter, saying what to pass instead.
func (c Config) Validate() error {
	switch {
	case c.Profile != ProfileShared && c.Profile != ProfileNovel && c.Profile != ProfileChat && c.Profile != ProfileGroups && c.Profile != ProfileConversations:
		return fmt.Errorf("workload: unknown profile %q: use %q, %q, %q, %q or %q", c.Profile, ProfileShared, ProfileNovel, ProfileChat, ProfileGroups, ProfileConversations)
	case c.Requests < 1:
		return fmt.Errorf("workload: -requests %d: need at least 1", c.Requests)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("workload: -rate %v: need a positive finite rate in requests per second", c.Rate)
	case c.MaxTokens < 1:
		return fmt.Errorf("workload: -max-tokens %d: need at least 1", c.MaxTokens)
	case c.Adapters < 0 || c.Adapters > 999 || (c.Adapters > 0 && c.Profile != ProfileShared):
		return fmt.Errorf("workload: -adapters %d: use 0, or 1..999 with the %q profile", c.Adapters, ProfileShared)
	}
	if err := c.validateBursts(); err != nil {
		return err
	}
	if c.HasPool() {
		switch {
		case c.Prefixes < 1 || c.Prefixes > 999:
			return fmt.Errorf("workload: -prefixes %d: need 1..999 (the tag has three digits)", c.Prefixes)
		case !(c.ZipfS >= 0) || math.IsInf(c.ZipfS, 0):
			return fmt.Errorf("workload: -zipf %v: need a finite exponent >= 0 (0 = uniform)", c.ZipfS)
		case c.PrefixTokens < len(prefixTag(0)):
			return fmt.Errorf("workload: -prefix-tokens %d: need at least %d for the tag", c.PrefixTokens, len(prefixTag(0)))
		case c.PrefixTokensMax != 0 && (c.PrefixTokensMax < c.PrefixTokens || c.PrefixTokensMax > maxPrefixTokens):
			return fmt.Errorf("workload: -prefix-tokens-max %d: use 0 (all prefixes -prefix-tokens long) or -prefix-tokens (%d)..%d", c.PrefixTokensMax, c.PrefixTokens, maxPrefixTokens)
		case (c.Profile == ProfileShared || c.Profile == ProfileGroups) && c.SuffixTokens < len(suffixTag(0)):
			return fmt.Errorf("workload: -suffix-tokens %d: need at least %d for the tag", c.SuffixTokens, len(suffixTag(0)))
		case c.Profile == ProfileGroups && (c.PromptsPerGroup < 1 || c.Prefixes*c.PromptsPerGroup > 1000000):
			return fmt.Errorf("workload: -prompts-per-group %d: need 1 or more, and at most 1,000,000 prompts in all (-prefixes x -prompts-per-group)", c.PromptsPerGroup)
		}
		switch c.Profile {
		case ProfileChat:
			return c.validateChat()
		case ProfileConversations:
			return c.validateConversations()
		}
		return nil
	}
	switch {
	case c.NovelPrefixTokens < len(novelTag(0, 0)):
		return fmt.Errorf("workload: -novel-prefix-tokens %d: need at least %d for the tag", c.NovelPrefixTokens, len(novelTag(0, 0)))
	case c.NovelSuffixTokens < len(suffixTag(0)):
		return fmt.Errorf("workload: -novel-suffix-tokens %d: need at least %d for the tag", c.NovelSuffixTokens, len(suffixTag(0)))
	}
	return nil
}

// maxPrefixTokens bounds a drawn prefix length (-prefix-tokens-max): 128k
// tokens, the longest context the engines' model takes.
const maxPrefixTokens = 131072

// Request is one request of a seed, in send order.
type Request struct {
	Index        int           // position in the seed, 0-based
	PrefixID     int           // shared prefix id (0 = most popular; the system prompt's in the chat profile); -1 in the novel profile
	SendAt       time.Duration // send time from the seed's start
	Text         string        // prompt text: prefix + "\n" + suffix (chat: system prompt, then the turns, one per line)
	Tokens       []uint32      // prompt token ids, one per text piece
	PrefixTokens int           // leading tokens that belong to the prefix
	MaxTokens    int           // completion tokens to request
	Adapter      string        // the LoRA adapter the request is for (its "model"); "" for the base model
	Capped       bool          // the prompt or its completion was cut to fit the context (conversations profile)
}

// AdapterName is the name of LoRA adapter i of a workload with Adapters set.
func AdapterName(i int) string { return fmt.Sprintf("lora-%d", i) }

// Pool is the fixed set of shared prefixes.
type Pool struct {
	texts  []string
	tokens [][]uint32
}

// NewPool builds the prefix pool of cfg from cfg.PoolSeed alone.
func NewPool(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{}
	if !cfg.HasPool() {
		return p, nil
	}
	lengths := prefixLengths(cfg)
	rng := rand.New(rand.NewPCG(cfg.PoolSeed, 0x706f6f6c))
	for i := range cfg.Prefixes {
		text, toks := fill(prefixTag(i), lengths[i], rng)
		p.texts = append(p.texts, text)
		p.tokens = append(p.tokens, toks)
	}
	return p, nil
}

// prefixLengths returns each prefix's length: PrefixTokens, or drawn from
// PrefixTokens..PrefixTokensMax by a generator of its own (seeded by the pool
// seed), so the pool's text generator draws as it does for fixed lengths.
func prefixLengths(cfg Config) []int {
	out := make([]int, cfg.Prefixes)
	var rng *rand.Rand
	if cfg.PrefixTokensMax > cfg.PrefixTokens {
		rng = rand.New(rand.NewPCG(cfg.PoolSeed, 0x6c656e73))
	}
	for i := range out {
		out[i] = cfg.PrefixTokens
		if rng != nil {
			out[i] += rng.IntN(cfg.PrefixTokensMax - cfg.PrefixTokens + 1)
		}
	}
	return out
}

// Len returns the number of prefixes.
func (p *Pool) Len() int { return len(p.tokens) }

// Tokens returns prefix id's token ids; the caller must not modify them.
func (p *Pool) Tokens(id int) []uint32 { return p.tokens[id] }

// ZipfWeights returns the normalized popularity of ranks 1..n under exponent s.
func ZipfWeights(n int, s float64) []float64 {
	w := make([]float64, n)
	var sum float64
	for k := range w {
		w[k] = math.Pow(float64(k+1), -s)
		sum += w[k]
	}
	for k := range w {
		w[k] /= sum
	}
	return w
}

// ErrPoolMismatch is returned when a pool does not belong to the config.
var ErrPoolMismatch = errors.New("workload: pool was built for a different config: build it with NewPool(cfg)")

// Generate returns the requests of one seed. pool must come from NewPool(cfg)
// (nil builds it). Equal (cfg, seed) give equal requests.
func Generate(cfg Config, pool *Pool, seed uint64) ([]Request, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		var err error
		if pool, err = NewPool(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.HasPool() && pool.Len() != cfg.Prefixes {
		return nil, ErrPoolMismatch
	}
	rng := rand.New(rand.NewPCG(seed, 0x73656564))
	var cdf []float64
	if cfg.HasPool() {
		w := ZipfWeights(cfg.Prefixes, cfg.ZipfS)
		cdf = make([]float64, len(w))
		var acc float64
		for i, x := range w {
			acc += x
			cdf[i] = acc
		}
		cdf[len(cdf)-1] = 1
	}
	switch cfg.Profile {
	case ProfileChat:
		return generateChat(cfg, pool, cdf, rng), nil
	case ProfileGroups:
		return generateGroups(cfg, pool, seed, rng), nil
	case ProfileConversations:
		return generateConversations(cfg, pool, rng), nil
	}
	reqs := make([]Request, cfg.Requests)
	var t float64
	for i := range reqs {
		t += rng.ExpFloat64() / cfg.Rate
		r := Request{Index: i, SendAt: time.Duration(cfg.warp(t) * float64(time.Second)), MaxTokens: cfg.MaxTokens}
		var headText string
		var head []uint32
		var suffixLen int
		if cfg.Profile == ProfileShared {
			r.PrefixID = zipfDraw(cdf, rng)
			headText, head = pool.texts[r.PrefixID], pool.tokens[r.PrefixID]
			suffixLen = cfg.SuffixTokens
			if cfg.Adapters > 0 {
				r.Adapter = AdapterName(r.PrefixID % cfg.Adapters)
			}
		} else {
			r.PrefixID = -1
			headText, head = fill(novelTag(seed, i), cfg.NovelPrefixTokens, rng)
			suffixLen = cfg.NovelSuffixTokens
		}
		sufText, suf := fill(suffixTag(i), suffixLen, rng)
		r.Text = headText + "\n" + sufText
		r.Tokens = make([]uint32, 0, len(head)+1+len(suf))
		r.Tokens = append(r.Tokens, head...)
		r.Tokens = append(r.Tokens, newlineID)
		r.Tokens = append(r.Tokens, suf...)
		r.PrefixTokens = len(head)
		reqs[i] = r
	}
	return reqs, nil
}

// piece is one token of text.
type piece struct {
	text string
	id   uint32
}

// fill returns the tag followed by filler words up to n tokens, as text and ids.
func fill(tag []piece, n int, rng *rand.Rand) (string, []uint32) {
	var b strings.Builder
	ids := make([]uint32, 0, n)
	for _, p := range tag {
		b.WriteString(p.text)
		ids = append(ids, p.id)
	}
	for len(ids) < n {
		w := rng.IntN(len(words))
		b.WriteByte(' ')
		b.WriteString(words[w])
		ids = append(ids, wordBase+uint32(w))
	}
	return b.String(), ids
}
