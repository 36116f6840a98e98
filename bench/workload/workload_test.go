package workload

import (
	"flag"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func generate(t *testing.T, cfg Config, seed uint64) []Request {
	t.Helper()
	reqs, err := Generate(cfg, nil, seed)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func TestGenerateIsDeterministicPerSeed(t *testing.T) {
	cfg := DefaultConfig()
	a := generate(t, cfg, 3)
	b := generate(t, cfg, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("seed 3 gave different requests on two calls")
	}
	c := generate(t, cfg, 4)
	samePrefixOrder, sameSuffix := true, 0
	for i := range a {
		if a[i].PrefixID != c[i].PrefixID {
			samePrefixOrder = false
		}
		if reflect.DeepEqual(a[i].Tokens[a[i].PrefixTokens:], c[i].Tokens[c[i].PrefixTokens:]) {
			sameSuffix++
		}
	}
	if samePrefixOrder || sameSuffix > 0 || a[0].SendAt == c[0].SendAt {
		t.Fatalf("seeds 3 and 4 share order=%v, %d suffixes, first send %v", samePrefixOrder, sameSuffix, a[0].SendAt)
	}
}

func TestPoolNeverVariesWithSeed(t *testing.T) {
	cfg := DefaultConfig()
	byPrefix := map[int][]uint32{}
	for _, seed := range []uint64{1, 2, 99} {
		for _, r := range generate(t, cfg, seed) {
			head := r.Tokens[:r.PrefixTokens]
			if prev, ok := byPrefix[r.PrefixID]; ok && !reflect.DeepEqual(prev, head) {
				t.Fatalf("prefix %d differs between seeds", r.PrefixID)
			}
			byPrefix[r.PrefixID] = head
		}
	}
	other := cfg
	other.PoolSeed++
	p1, _ := NewPool(cfg)
	p2, _ := NewPool(other)
	if reflect.DeepEqual(p1.Tokens(5), p2.Tokens(5)) {
		t.Fatal("a different pool seed gave the same prefix")
	}
}

func TestTokenCounts(t *testing.T) {
	tests := []struct {
		name               string
		profile            string
		wantHead, wantTail int
	}{
		{"published shared prefixes", ProfileShared, 1544, 34},
		{"novel prompts", ProfileNovel, 2048, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Profile = tt.profile
			for _, r := range generate(t, cfg, 1) {
				if r.PrefixTokens != tt.wantHead || len(r.Tokens) != tt.wantHead+1+tt.wantTail {
					t.Fatalf("request %d: %d head + %d total tokens, want %d + %d", r.Index, r.PrefixTokens, len(r.Tokens), tt.wantHead, tt.wantHead+1+tt.wantTail)
				}
				if r.Tokens[r.PrefixTokens] != newlineID {
					t.Fatalf("request %d: no newline token between prefix and suffix", r.Index)
				}
				if r.MaxTokens != 64 {
					t.Fatalf("max tokens %d, want 64", r.MaxTokens)
				}
				// Text and ids agree: one id per word, the tags counted per piece.
				if got := textTokens(r.Text); got != len(r.Tokens) {
					t.Fatalf("request %d: text has %d pieces, tokens %d", r.Index, got, len(r.Tokens))
				}
			}
		})
	}
}

// textTokens counts the synthetic vocabulary's pieces in a prompt text.
func textTokens(s string) int {
	n := 0
	for _, line := range strings.Split(s, "\n") {
		fields := strings.Fields(line)
		tag := fields[0] // "[PREFIX-007]": '[', word, '-', digits, ']'
		inner := strings.Trim(tag, "[]")
		for _, part := range strings.Split(inner, "-") {
			if part == "PREFIX" || part == "NOVEL" {
				n++
			} else {
				n += len(part)
			}
		}
		n += 2 + strings.Count(inner, "-") // brackets and dashes
		n += len(fields) - 1
	}
	return n + 1 // the newline
}

func TestTagsMakeFirstBlocksDistinct(t *testing.T) {
	for _, profile := range []string{ProfileShared, ProfileNovel} {
		cfg := DefaultConfig()
		cfg.Profile = profile
		seen := map[string]int{}
		for _, r := range generate(t, cfg, 7) {
			key := fmt.Sprint(r.Tokens[:16])
			if prev, ok := seen[key]; ok && (profile == ProfileNovel || prev != r.PrefixID) {
				t.Fatalf("%s: requests with prefixes %d and %d share a first block", profile, prev, r.PrefixID)
			}
			seen[key] = r.PrefixID
		}
		r := generate(t, cfg, 7)[123]
		if !strings.Contains(r.Text, "\n[Q-000123] ") {
			t.Errorf("%s: suffix tag missing in %q", profile, r.Text[len(r.Text)-200:])
		}
	}
	r := generate(t, DefaultConfig(), 7)[0]
	if want := fmt.Sprintf("[PREFIX-%03d] ", r.PrefixID); !strings.HasPrefix(r.Text, want) {
		t.Errorf("text starts %q, want %q", r.Text[:20], want)
	}
}

func TestZipfShares(t *testing.T) {
	w := ZipfWeights(128, 0.9)
	top, top3 := w[0], w[0]+w[1]+w[2]
	// The published shares, rounded: 14.8% and 28.0%.
	if math.Abs(top-0.148) > 0.0025 || math.Abs(top3-0.280) > 0.0025 {
		t.Fatalf("analytic shares top=%.4f top3=%.4f, want ~0.148 and ~0.280", top, top3)
	}
	counts := make([]int, 128)
	n := 0
	for seed := range uint64(24) {
		for _, r := range generate(t, DefaultConfig(), seed) {
			counts[r.PrefixID]++
			n++
		}
	}
	gotTop := float64(counts[0]) / float64(n)
	gotTop3 := float64(counts[0]+counts[1]+counts[2]) / float64(n)
	// 12,000 draws: the standard error of the top share is 0.0032.
	if math.Abs(gotTop-top) > 0.013 || math.Abs(gotTop3-top3) > 0.016 {
		t.Fatalf("sampled shares top=%.4f top3=%.4f, want %.4f and %.4f", gotTop, gotTop3, top, top3)
	}
}

func TestPoissonArrivals(t *testing.T) {
	cfg := DefaultConfig()
	var gaps []float64
	for seed := range uint64(10) {
		var prev time.Duration
		for _, r := range generate(t, cfg, seed) {
			if r.SendAt < prev {
				t.Fatalf("seed %d: send times go backwards at %d", seed, r.Index)
			}
			gaps = append(gaps, (r.SendAt - prev).Seconds())
			prev = r.SendAt
		}
	}
	var sum, sq float64
	for _, g := range gaps {
		sum += g
		sq += g * g
	}
	mean := sum / float64(len(gaps))
	cv := math.Sqrt(sq/float64(len(gaps))-mean*mean) / mean
	// Exponential gaps: mean 1/16 s, coefficient of variation 1.
	if math.Abs(mean-1.0/16) > 0.003 || math.Abs(cv-1) > 0.05 {
		t.Fatalf("gaps mean %.4f s cv %.3f, want 0.0625 and 1", mean, cv)
	}
}

func TestNovelPromptsAreAllUnique(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Profile = ProfileNovel
	cfg.Requests = 50
	a := generate(t, cfg, 1)
	b := generate(t, cfg, 2)
	seen := map[string]bool{}
	for _, r := range append(a, b...) {
		if r.PrefixID != -1 {
			t.Fatalf("novel request has prefix id %d", r.PrefixID)
		}
		k := fmt.Sprint(r.Tokens[:16])
		if seen[k] {
			t.Fatalf("two novel prompts share a first block: %s", k)
		}
		seen[k] = true
	}
}

// validateCase is one config change and the flag its error must name ("" = valid).
type validateCase struct {
	name   string
	mutate func(*Config)
	want   string
}

func TestValidate(t *testing.T) {
	tests := append([]validateCase{
		{"defaults are valid", func(*Config) {}, ""},
		{"unknown profile", func(c *Config) { c.Profile = "zipfy" }, "unknown profile"},
		{"no requests", func(c *Config) { c.Requests = 0 }, "-requests"},
		{"zero rate", func(c *Config) { c.Rate = 0 }, "-rate"},
		{"infinite rate", func(c *Config) { c.Rate = math.Inf(1) }, "-rate"},
		{"no output", func(c *Config) { c.MaxTokens = 0 }, "-max-tokens"},
		{"too many prefixes", func(c *Config) { c.Prefixes = 1000 }, "-prefixes"},
		{"negative zipf", func(c *Config) { c.ZipfS = -1 }, "-zipf"},
		{"prefix shorter than its tag", func(c *Config) { c.PrefixTokens = 3 }, "-prefix-tokens"},
		{"suffix shorter than its tag", func(c *Config) { c.SuffixTokens = 3 }, "-suffix-tokens"},
		{"novel body too short", func(c *Config) { c.Profile = ProfileNovel; c.NovelPrefixTokens = 2 }, "-novel-prefix-tokens"},
		{"novel suffix too short", func(c *Config) { c.Profile = ProfileNovel; c.NovelSuffixTokens = 2 }, "-novel-suffix-tokens"},
	}, shapeValidateCases...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
			if _, gerr := Generate(c, nil, 1); gerr == nil {
				t.Fatal("Generate accepted an invalid config")
			}
		})
	}
}

func TestGenerateRejectsForeignPool(t *testing.T) {
	small := DefaultConfig()
	small.Prefixes = 4
	pool, err := NewPool(small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(DefaultConfig(), pool, 1); err != ErrPoolMismatch {
		t.Fatalf("err = %v, want ErrPoolMismatch", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c.RegisterFlags(fs)
	args := []string{"-profile", "novel", "-requests", "7", "-rate", "2.5", "-prefixes", "9", "-zipf", "1.1",
		"-prefix-tokens", "100", "-suffix-tokens", "20", "-novel-prefix-tokens", "300", "-novel-suffix-tokens", "12",
		"-max-tokens", "8", "-pool-seed", "5", "-prefix-tokens-max", "200", "-burst-every", "20s", "-burst-len", "2s", "-burst-factor", "4",
		"-turns", "3", "-think-time", "5s", "-user-tokens", "40", "-prompts-per-group", "6",
		"-conversations", "3", "-system-tokens", "fixed mean=9", "-turn-count", "uniform min=1 max=4", "-input-tokens", "normal min=1 max=9 mean=5 std=1",
		"-output-tokens", "exponential min=1 max=99 mean=9", "-tool-latency", "lognormal min=1 max=5 mean=2 std=3", "-context", "9000"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	want := Config{Profile: ProfileNovel, Requests: 7, Rate: 2.5, Prefixes: 9, ZipfS: 1.1, PrefixTokens: 100,
		SuffixTokens: 20, NovelPrefixTokens: 300, NovelSuffixTokens: 12, MaxTokens: 8, PoolSeed: 5, PrefixTokensMax: 200,
		BurstEvery: 20 * time.Second, BurstLen: 2 * time.Second, BurstFactor: 4, Turns: 3, ThinkTime: 5 * time.Second, UserTokens: 40, PromptsPerGroup: 6,
		Conversations: 3, SystemTokens: Fixed(9), TurnCount: Dist{Kind: DistUniform, Min: 1, Max: 4}, InputTokens: Dist{Kind: DistNormal, Min: 1, Max: 9, Mean: 5, Std: 1},
		OutputTokens: Dist{Kind: DistExponential, Min: 1, Max: 99, Mean: 9}, ToolLatency: Dist{Kind: DistLognormal, Min: 1, Max: 5, Mean: 2, Std: 3}, Context: 9000}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
}

func TestWordsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range words {
		if seen[w] {
			t.Fatalf("filler word %q appears twice: text would not map to one id", w)
		}
		seen[w] = true
	}
}

func BenchmarkGenerateSeed(b *testing.B) {
	cfg := DefaultConfig()
	pool, err := NewPool(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Generate(cfg, pool, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAdaptersFollowThePrefixes: with Adapters, each request is for the adapter owning
// its prefix (k mod Adapters), the same requests otherwise; without, none has one.
func TestAdaptersFollowThePrefixes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Requests = 200
	plain, err := Generate(cfg, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Adapters = 8
	lora, err := Generate(cfg, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, r := range lora {
		if plain[i].Adapter != "" {
			t.Fatalf("request %d of a workload without adapters is for %q", i, plain[i].Adapter)
		}
		if want := AdapterName(r.PrefixID % 8); r.Adapter != want {
			t.Fatalf("request %d (prefix %d) is for %q, want %q", i, r.PrefixID, r.Adapter, want)
		}
		if r.PrefixID != plain[i].PrefixID || r.SendAt != plain[i].SendAt {
			t.Fatalf("request %d differs beyond its adapter", i)
		}
		seen[r.Adapter]++
	}
	if len(seen) != 8 || seen[AdapterName(0)] <= seen[AdapterName(7)] {
		t.Fatalf("adapter counts %v: want all 8, the first the most popular", seen)
	}
	cfg.Profile = ProfileNovel
	if err := cfg.Validate(); err == nil {
		t.Fatal("adapters with the novel profile must be refused")
	}
}
