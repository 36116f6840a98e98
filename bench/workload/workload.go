// Package workload generates the benchmark's requests: the published
// shared-prefix workload (a fixed pool of 128 prefixes chosen by Zipf s = 0.9,
// a unique suffix per request, open-loop Poisson arrivals) and the "novel"
// profile (every prompt unique).
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
	"sort"
	"strings"
	"time"
)

// Profiles.
const (
	ProfileShared = "shared" // the published workload: shared prefixes, Zipf popularity
	ProfileNovel  = "novel"  // every prompt unique: the cache path's cost with no benefit
)

// Config is every parameter of the workload. DefaultConfig is the published
// experiment.
type Config struct {
	Profile           string  // ProfileShared or ProfileNovel
	Requests          int     // requests per seed
	Rate              float64 // mean arrival rate, requests per second (Poisson)
	Prefixes          int     // distinct prefixes in the pool (shared profile)
	ZipfS             float64 // Zipf exponent: p(rank k) proportional to 1/k^s
	PrefixTokens      int     // tokens per prefix, tag included (shared profile)
	SuffixTokens      int     // tokens per suffix, tag included (shared profile)
	NovelPrefixTokens int     // tokens of the unique body (novel profile)
	NovelSuffixTokens int     // tokens of the suffix (novel profile)
	MaxTokens         int     // completion tokens requested (max_tokens)
	PoolSeed          uint64  // fixes the prefix pool; never varies between seeds
}

// DefaultConfig returns the published workload: 500 requests per seed at
// 16 req/s, 128 prefixes of 1,544 tokens under Zipf 0.9, 34-token suffixes,
// 64 output tokens.
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
	}
}

// RegisterFlags registers one flag per field on fs, with c's current values
// as defaults; parsing fs writes into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Profile, "profile", c.Profile, "workload profile: shared (published prefixes, Zipf) or novel (every prompt unique)")
	fs.IntVar(&c.Requests, "requests", c.Requests, "requests per seed")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "open-loop Poisson arrival rate, requests per second")
	fs.IntVar(&c.Prefixes, "prefixes", c.Prefixes, "distinct shared prefixes in the pool")
	fs.Float64Var(&c.ZipfS, "zipf", c.ZipfS, "Zipf exponent s of prefix popularity (p(k) ~ 1/k^s)")
	fs.IntVar(&c.PrefixTokens, "prefix-tokens", c.PrefixTokens, "tokens per shared prefix, tag included")
	fs.IntVar(&c.SuffixTokens, "suffix-tokens", c.SuffixTokens, "tokens per unique suffix, tag included")
	fs.IntVar(&c.NovelPrefixTokens, "novel-prefix-tokens", c.NovelPrefixTokens, "unique body tokens per prompt in the novel profile")
	fs.IntVar(&c.NovelSuffixTokens, "novel-suffix-tokens", c.NovelSuffixTokens, "suffix tokens per prompt in the novel profile")
	fs.IntVar(&c.MaxTokens, "max-tokens", c.MaxTokens, "completion tokens per request (max_tokens)")
	fs.Uint64Var(&c.PoolSeed, "pool-seed", c.PoolSeed, "seed of the prefix pool (never varies between seeds)")
}

// Validate reports the first unusable parameter, saying what to pass instead.
func (c Config) Validate() error {
	switch {
	case c.Profile != ProfileShared && c.Profile != ProfileNovel:
		return fmt.Errorf("workload: unknown profile %q: use %q or %q", c.Profile, ProfileShared, ProfileNovel)
	case c.Requests < 1:
		return fmt.Errorf("workload: -requests %d: need at least 1", c.Requests)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("workload: -rate %v: need a positive finite rate in requests per second", c.Rate)
	case c.MaxTokens < 1:
		return fmt.Errorf("workload: -max-tokens %d: need at least 1", c.MaxTokens)
	}
	if c.Profile == ProfileShared {
		switch {
		case c.Prefixes < 1 || c.Prefixes > 999:
			return fmt.Errorf("workload: -prefixes %d: need 1..999 (the tag has three digits)", c.Prefixes)
		case !(c.ZipfS >= 0) || math.IsInf(c.ZipfS, 0):
			return fmt.Errorf("workload: -zipf %v: need a finite exponent >= 0 (0 = uniform)", c.ZipfS)
		case c.PrefixTokens < len(prefixTag(0)):
			return fmt.Errorf("workload: -prefix-tokens %d: need at least %d for the tag", c.PrefixTokens, len(prefixTag(0)))
		case c.SuffixTokens < len(suffixTag(0)):
			return fmt.Errorf("workload: -suffix-tokens %d: need at least %d for the tag", c.SuffixTokens, len(suffixTag(0)))
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

// Request is one request of a seed, in send order.
type Request struct {
	Index        int           // position in the seed, 0-based
	PrefixID     int           // shared prefix id (0 = most popular); -1 in the novel profile
	SendAt       time.Duration // send time from the seed's start
	Text         string        // prompt text: prefix + "\n" + suffix
	Tokens       []uint32      // prompt token ids, one per text piece
	PrefixTokens int           // leading tokens that belong to the prefix
	MaxTokens    int           // completion tokens to request
}

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
	if cfg.Profile != ProfileShared {
		return p, nil
	}
	rng := rand.New(rand.NewPCG(cfg.PoolSeed, 0x706f6f6c))
	for i := range cfg.Prefixes {
		text, toks := fill(prefixTag(i), cfg.PrefixTokens, rng)
		p.texts = append(p.texts, text)
		p.tokens = append(p.tokens, toks)
	}
	return p, nil
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
	if cfg.Profile == ProfileShared && pool.Len() != cfg.Prefixes {
		return nil, ErrPoolMismatch
	}
	rng := rand.New(rand.NewPCG(seed, 0x73656564))
	var cdf []float64
	if cfg.Profile == ProfileShared {
		w := ZipfWeights(cfg.Prefixes, cfg.ZipfS)
		cdf = make([]float64, len(w))
		var acc float64
		for i, x := range w {
			acc += x
			cdf[i] = acc
		}
		cdf[len(cdf)-1] = 1
	}
	reqs := make([]Request, cfg.Requests)
	var t float64
	for i := range reqs {
		t += rng.ExpFloat64() / cfg.Rate
		r := Request{Index: i, SendAt: time.Duration(t * float64(time.Second)), MaxTokens: cfg.MaxTokens}
		var headText string
		var head []uint32
		var suffixLen int
		if cfg.Profile == ProfileShared {
			u := rng.Float64()
			r.PrefixID = sort.SearchFloat64s(cdf, u)
			if r.PrefixID >= len(cdf) {
				r.PrefixID = len(cdf) - 1
			}
			headText, head = pool.texts[r.PrefixID], pool.tokens[r.PrefixID]
			suffixLen = cfg.SuffixTokens
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
