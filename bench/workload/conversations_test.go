package workload

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// convConfig is a small conversations workload: 6 conversations on one
// 300-token shared system prompt in a 4,096-token context.
func convConfig() Config {
	c := DefaultConfig()
	c.Profile, c.Prefixes, c.PrefixTokens, c.Rate, c.Requests = ProfileConversations, 1, 300, 0.5, 120
	c.Conversations, c.Context = 6, 4096
	c.SystemTokens = Dist{Kind: DistUniform, Min: 100, Max: 3000}
	c.TurnCount = Dist{Kind: DistUniform, Min: 2, Max: 12}
	c.InputTokens = Dist{Kind: DistLognormal, Min: 20, Max: 600, Mean: 150, Std: 100}
	c.OutputTokens = Dist{Kind: DistLognormal, Min: 5, Max: 2500, Mean: 100, Std: 300}
	c.ToolLatency = Dist{Kind: DistLognormal, Min: 1, Max: 30, Mean: 4, Std: 6}
	return c
}

// decode spells token ids as the synthetic vocabulary writes them.
func decode(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= wordBase:
			b.WriteString(" " + words[id-wordBase])
		case id == newlineID:
			b.WriteByte('\n')
		case id == prefixID:
			b.WriteString("PREFIX")
		default:
			b.WriteByte(byte(id + 33))
		}
	}
	return b.String()
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// A conversation's prompts extend one another, conversations share only
// their system prompt, every request fits the context (cut ones marked),
// the text spells the tokens, and the slots send at the rate.
func TestConversationsShape(t *testing.T) {
	cfg := convConfig()
	reqs, err := Generate(cfg, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Generate(cfg, nil, 1)
	byConv := map[int][][]uint32{}
	capped := 0
	for i, r := range reqs {
		if !slices.Equal(r.Tokens, again[i].Tokens) || r.SendAt != again[i].SendAt {
			t.Fatalf("request %d differs between two generations of seed 1", i)
		}
		if i > 0 && r.SendAt < reqs[i-1].SendAt {
			t.Fatalf("request %d sent before request %d", i, i-1)
		}
		if len(r.Tokens)+r.MaxTokens > cfg.Context {
			t.Fatalf("request %d: %d + %d tokens exceed the %d-token context", i, len(r.Tokens), r.MaxTokens, cfg.Context)
		}
		if r.MaxTokens > int(cfg.OutputTokens.Max) || r.MaxTokens < 1 {
			t.Fatalf("request %d asks for %d tokens", i, r.MaxTokens)
		}
		if r.Capped {
			capped++
		}
		if decode(r.Tokens) != r.Text {
			t.Fatalf("request %d: the text does not spell its tokens", i)
		}
		conv := int(r.Tokens[cfg.PrefixTokens+9]) // the last digit of "\n[S-00000c": the conversation
		byConv[conv] = append(byConv[conv], r.Tokens)
	}
	if len(byConv) != cfg.Conversations {
		t.Fatalf("%d conversations sent, want %d", len(byConv), cfg.Conversations)
	}
	if capped == 0 || capped == len(reqs) {
		t.Fatalf("%d of %d requests cut: this workload should cut some and not all", capped, len(reqs))
	}
	var firsts [][]uint32
	for _, prompts := range byConv {
		firsts = append(firsts, prompts[0])
		for j := 1; j < len(prompts); j++ {
			a, b := prompts[j-1], prompts[j]
			if n := commonPrefix(a, b); n != min(len(a), len(b)) {
				t.Fatalf("two prompts of a conversation share %d tokens: the shorter (%d) is not a prefix of the longer", n, min(len(a), len(b)))
			}
		}
	}
	for i := 1; i < len(firsts); i++ {
		if n := commonPrefix(firsts[0], firsts[i]); n < cfg.PrefixTokens || n > cfg.PrefixTokens+12 {
			t.Fatalf("two conversations share %d tokens, want their %d-token system prompt and the tag's start", n, cfg.PrefixTokens)
		}
	}
	span := (reqs[len(reqs)-1].SendAt - reqs[0].SendAt).Seconds()
	if rate := float64(len(reqs)-1) / span; rate < 0.75*cfg.Rate || rate > 1.25*cfg.Rate {
		t.Fatalf("sent at %.3f req/s, want %g", rate, cfg.Rate)
	}
}

// Every seed replays the same conversations at other times: the first
// request of each conversation is its turn 0 in every seed.
func TestConversationsSameBlueprintsEverySeed(t *testing.T) {
	cfg := convConfig()
	first := func(seed uint64) (map[uint32][]uint32, []time.Duration) {
		reqs, err := Generate(cfg, nil, seed)
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint32][]uint32{}
		var at []time.Duration
		for _, r := range reqs {
			k := r.Tokens[cfg.PrefixTokens+9]
			if _, ok := out[k]; !ok {
				out[k] = r.Tokens
			}
			at = append(at, r.SendAt)
		}
		return out, at
	}
	a, atA := first(1)
	b, atB := first(2)
	for k, toks := range a {
		if !slices.Equal(toks, b[k]) {
			t.Fatalf("conversation %d's turn 0 differs between seeds", k)
		}
	}
	if slices.Equal(atA, atB) {
		t.Fatal("seeds 1 and 2 send at the same times")
	}
}

// One turn per conversation (the reasoning catalog): each slot sends the
// same prompt over and over.
func TestConversationsOneTurnRepeats(t *testing.T) {
	cfg := convConfig()
	cfg.TurnCount, cfg.SystemTokens, cfg.Conversations = Fixed(1), Fixed(0), 3
	reqs, err := Generate(cfg, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[string]bool{}
	for _, r := range reqs {
		distinct[r.Text] = true
	}
	if len(distinct) != 3 {
		t.Fatalf("%d distinct prompts, want one per conversation (3)", len(distinct))
	}
}

func TestConversationsValidate(t *testing.T) {
	cases := []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"too fast", func(c *Config) { c.Rate = 10 }, "send at most 1.5 req/s"},
		{"no conversations", func(c *Config) { c.Conversations = 0 }, "-conversations 0"},
		{"small context", func(c *Config) { c.Context = 500 }, "-context 500"},
		{"unbounded length", func(c *Config) { c.InputTokens = Dist{Kind: DistLognormal, Min: 1, Max: math.Inf(1), Mean: 5} }, "give a max"},
		{"zero turns", func(c *Config) { c.TurnCount = Fixed(0) }, "-turn-count"},
		{"bad dist", func(c *Config) { c.OutputTokens = Dist{Kind: DistUniform, Min: 5, Max: 1} }, "below min"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := convConfig()
			c.set(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
