package workload

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func bursty() Config {
	c := DefaultConfig()
	c.BurstEvery, c.BurstLen, c.BurstFactor = 30*time.Second, 5*time.Second, 3
	return c
}

func TestWarpMapsTheMeanRateOntoBursts(t *testing.T) {
	c := bursty()
	// base = 16 * 30 / (3*5 + 25) = 12 req/s; a burst carries 3*12*5 = 180 of
	// the period's 480 requests, i.e. the first 11.25 s of the unwarped clock.
	tests := []struct {
		name  string
		cfg   Config
		u     float64
		want  float64
		slack float64
	}{
		{"no bursts: identity", DefaultConfig(), 12.345, 12.345, 0},
		{"factor 1: identity", func() Config { c := bursty(); c.BurstFactor = 1; return c }(), 17.5, 17.5, 1e-12},
		{"start of a period", c, 0, 0, 0},
		{"end of the first burst", c, 11.25, 5, 1e-12},
		{"inside the burst: 3x the base rate", c, 5.625, 2.5, 1e-12},
		{"after the burst: the base rate", c, 11.25 + 12.0/16, 6, 1e-12},
		{"a whole period later", c, 30 + 11.25, 35, 1e-12},
		{"periods end where they began", c, 60, 60, 1e-9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.warp(tt.u); math.Abs(got-tt.want) > tt.slack {
				t.Fatalf("warp(%v) = %v, want %v", tt.u, got, tt.want)
			}
		})
	}
}

func TestBurstsMoveArrivalsNotPrompts(t *testing.T) {
	plain, b := DefaultConfig(), bursty()
	plain.Requests, b.Requests = 2000, 2000
	var inBurst, outBurst int
	var span float64
	for seed := range uint64(5) {
		p, q := generate(t, plain, seed), generate(t, b, seed)
		for i := range p {
			if p[i].PrefixID != q[i].PrefixID || !slices.Equal(p[i].Tokens, q[i].Tokens) {
				t.Fatalf("seed %d request %d: bursts changed the prompt", seed, i)
			}
			if i > 0 && q[i].SendAt < q[i-1].SendAt {
				t.Fatalf("seed %d: send times go backwards at %d", seed, i)
			}
		}
		// Whole periods only: the seed ends inside its last one.
		whole := math.Floor(q[len(q)-1].SendAt.Seconds()/30) * 30
		for _, r := range q {
			switch at := r.SendAt.Seconds(); {
			case at >= whole:
			case math.Mod(at, 30) < 5:
				inBurst++
			default:
				outBurst++
			}
		}
		span += whole
	}
	// ~8,000 arrivals: per-second density in bursts over between them ~ 3.
	ratio := (float64(inBurst) / 5) / (float64(outBurst) / 25)
	if math.Abs(ratio-3) > 0.3 {
		t.Fatalf("arrivals per second in bursts / between them = %.2f, want ~3", ratio)
	}
	if rate := float64(inBurst+outBurst) / span; math.Abs(rate-16) > 0.8 {
		t.Fatalf("mean rate %.2f req/s, want ~16 (bursts keep the mean)", rate)
	}
}

func TestVariablePrefixLengths(t *testing.T) {
	c := DefaultConfig()
	c.Prefixes, c.PrefixTokens, c.PrefixTokensMax = 12, 8192, 32768
	pool, err := NewPool(c)
	if err != nil {
		t.Fatal(err)
	}
	lengths := map[int]bool{}
	for i := range pool.Len() {
		n := len(pool.Tokens(i))
		if n < 8192 || n > 32768 {
			t.Fatalf("prefix %d has %d tokens, want 8192..32768", i, n)
		}
		lengths[n] = true
	}
	if len(lengths) < 10 {
		t.Fatalf("only %d distinct lengths among 12 prefixes", len(lengths))
	}
	again, _ := NewPool(c)
	if !reflect.DeepEqual(pool, again) {
		t.Fatal("the same pool seed gave a different pool")
	}
	for _, r := range generate(t, c, 3)[:50] {
		if r.PrefixTokens != len(pool.Tokens(r.PrefixID)) || !slices.Equal(r.Tokens[:r.PrefixTokens], pool.Tokens(r.PrefixID)) {
			t.Fatalf("request %d does not start with its %d-token prefix", r.Index, len(pool.Tokens(r.PrefixID)))
		}
	}
	fixed, equal := DefaultConfig(), DefaultConfig()
	equal.PrefixTokensMax = equal.PrefixTokens
	p1, _ := NewPool(fixed)
	p2, _ := NewPool(equal)
	if !reflect.DeepEqual(p1, p2) {
		t.Fatal("a range of one length changed the fixed-length pool")
	}
}

// chatTurn reads the session and turn of a chat prompt's last user message.
func chatTurn(t *testing.T, text string) (session, k int) {
	t.Helper()
	lines := strings.Split(text, "\n")
	if _, err := fmt.Sscanf(lines[len(lines)-1], "[U-%06d-%d]", &session, &k); err != nil {
		t.Fatalf("last line %q is not a user message: %v", lines[len(lines)-1][:20], err)
	}
	return session, k
}

func chat() Config {
	c := DefaultConfig()
	c.Profile = ProfileChat
	return c
}

func TestChatPromptsGrowTurnByTurn(t *testing.T) {
	c := chat()
	pool, err := NewPool(c)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := Generate(c, pool, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != c.Requests {
		t.Fatalf("%d requests, want %d", len(reqs), c.Requests)
	}
	type last struct {
		r Request
		k int
	}
	sessions := map[int]last{}
	lateStarts, grown := 0, 0
	for i, r := range reqs {
		if r.Index != i || (i > 0 && r.SendAt < reqs[i-1].SendAt) {
			t.Fatalf("request %d: index %d, sent %v: want numbered in send order", i, r.Index, r.SendAt)
		}
		if got := textTokens(r.Text) - 1 + strings.Count(r.Text, "\n"); got != len(r.Tokens) {
			t.Fatalf("request %d: text has %d pieces, tokens %d", i, got, len(r.Tokens))
		}
		if !slices.Equal(r.Tokens[:r.PrefixTokens], pool.Tokens(r.PrefixID)) {
			t.Fatalf("request %d does not start with system prompt %d", i, r.PrefixID)
		}
		s, k := chatTurn(t, r.Text)
		prev, seen := sessions[s]
		switch {
		case !seen && k > 1:
			lateStarts++ // a session in progress when the seed began
			if want := len(pool.Tokens(r.PrefixID)) + k*(1+c.UserTokens) + (k-1)*(1+c.MaxTokens); len(r.Tokens) != want {
				t.Fatalf("session %d turn %d: %d tokens, want %d (its whole history)", s, k, len(r.Tokens), want)
			}
		case seen:
			if k != prev.k+1 {
				t.Fatalf("session %d: turn %d after turn %d", s, k, prev.k)
			}
			if !slices.Equal(r.Tokens[:len(prev.r.Tokens)], prev.r.Tokens) || len(r.Tokens) != len(prev.r.Tokens)+2+c.MaxTokens+c.UserTokens {
				t.Fatalf("session %d turn %d does not extend turn %d by a %d-token reply and a %d-token message", s, k, prev.k, c.MaxTokens, c.UserTokens)
			}
			gap := (r.SendAt - prev.r.SendAt).Seconds()
			if gap < 0.5*c.ThinkTime.Seconds() || gap > 1.5*c.ThinkTime.Seconds() {
				t.Fatalf("session %d: %.2f s between turns, want 0.5-1.5 x %v", s, gap, c.ThinkTime)
			}
			grown++
		}
		if r.PrefixID != prev.r.PrefixID && seen {
			t.Fatalf("session %d changed its system prompt", s)
		}
		sessions[s] = last{r, k}
	}
	if lateStarts == 0 || grown < c.Requests/2 {
		t.Fatalf("%d sessions in progress at the start, %d follow-up turns: want both", lateStarts, grown)
	}
}

func TestChatRateAndDeterminism(t *testing.T) {
	c := chat()
	var n, span float64
	for seed := range uint64(8) {
		reqs := generate(t, c, seed)
		n += float64(len(reqs))
		span += (reqs[len(reqs)-1].SendAt - reqs[0].SendAt).Seconds()
	}
	if rate := n / span; math.Abs(rate-c.Rate) > 0.1*c.Rate {
		t.Fatalf("chat request rate %.2f req/s, want ~%g", rate, c.Rate)
	}
	if a, b := generate(t, c, 3), generate(t, c, 3); !reflect.DeepEqual(a, b) {
		t.Fatal("seed 3 gave different chats twice")
	}
	if a, b := generate(t, c, 3), generate(t, c, 4); a[0].SendAt == b[0].SendAt && slices.Equal(a[0].Tokens, b[0].Tokens) {
		t.Fatal("seeds 3 and 4 gave the same chat")
	}
	pool, _ := NewPool(c)
	if _, err := Warmup(c, pool, 0); err != nil {
		t.Fatalf("the warm-up of the chat profile's system prompts: %v", err)
	}
}

// shapeValidateCases are TestValidate's cases for the bursts, prefix ranges and chat
// sessions.
var shapeValidateCases = []validateCase{
	{"bursts are valid", func(c *Config) { *c = bursty() }, ""},
	{"chat is valid", func(c *Config) { *c = chat() }, ""},
	{"negative burst period", func(c *Config) { c.BurstEvery = -time.Second }, "-burst-every"},
	{"burst as long as its period", func(c *Config) { *c = bursty(); c.BurstLen = c.BurstEvery }, "-burst-len"},
	{"no burst length", func(c *Config) { *c = bursty(); c.BurstLen = 0 }, "-burst-len"},
	{"burst below the base rate", func(c *Config) { *c = bursty(); c.BurstFactor = 0.5 }, "-burst-factor"},
	{"bursts of chat sessions", func(c *Config) { *c = chat(); c.BurstEvery = 30 * time.Second }, "not to chat sessions"},
	{"prefix range upside down", func(c *Config) { c.PrefixTokensMax = c.PrefixTokens - 1 }, "-prefix-tokens-max"},
	{"prefixes beyond the context", func(c *Config) { c.PrefixTokensMax = 200000 }, "-prefix-tokens-max"},
	{"no turns", func(c *Config) { *c = chat(); c.Turns = 0 }, "-turns"},
	{"no think time", func(c *Config) { *c = chat(); c.ThinkTime = 0 }, "-think-time"},
	{"user message shorter than its tag", func(c *Config) { *c = chat(); c.UserTokens = 3 }, "-user-tokens"},
	{"chat needs a pool", func(c *Config) { *c = chat(); c.Prefixes = 0 }, "-prefixes"},
	{"unknown profile names chat", func(c *Config) { c.Profile = "dialogue" }, `"chat"`},
}
