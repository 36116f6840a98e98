package workload

import (
	"math"
	"testing"
)

func TestGroupsFollowSharedPrefixParameters(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Profile, cfg.Prefixes, cfg.PromptsPerGroup = ProfileGroups, 15, 5
	cfg.PrefixTokens, cfg.SuffixTokens, cfg.MaxTokens = 600, 120, 100
	cfg.Requests, cfg.Rate = 3*75, 10
	reqs, err := Generate(cfg, nil, 7)
	if err != nil {
		t.Fatal(err)
	}
	prompts := map[string]int{}
	groups := map[int]int{}
	for i, r := range reqs {
		if len(r.Tokens) != cfg.PrefixTokens+1+cfg.SuffixTokens || r.MaxTokens != cfg.MaxTokens || r.PrefixTokens != cfg.PrefixTokens {
			t.Fatalf("request %d: %d tokens (prefix %d), max %d; want %d+1+%d, max %d", i, len(r.Tokens), r.PrefixTokens, r.MaxTokens, cfg.PrefixTokens, cfg.SuffixTokens, cfg.MaxTokens)
		}
		prompts[r.Text]++
		groups[r.PrefixID]++
		if i >= 75 && r.Text != reqs[i-75].Text {
			t.Fatalf("request %d is not the prompt sent one cycle (75) before: prompts are sent in turn", i)
		}
	}
	if len(prompts) != 75 || len(groups) != 15 {
		t.Fatalf("%d distinct prompts in %d groups; want 75 in 15", len(prompts), len(groups))
	}
	for text, n := range prompts {
		if n != 3 {
			t.Fatalf("prompt %.20q sent %d times in 3 cycles", text, n)
		}
	}
	for g, n := range groups {
		if n != 15 {
			t.Fatalf("group %d sent %d times; want 3 cycles x 5 prompts", g, n)
		}
	}
	if rate := float64(len(reqs)-1) / reqs[len(reqs)-1].SendAt.Seconds(); math.Abs(rate-cfg.Rate)/cfg.Rate > 0.2 {
		t.Fatalf("arrival rate %.2f req/s, want about %g", rate, cfg.Rate)
	}
	other, _ := Generate(cfg, nil, 8)
	if other[0].Text == reqs[0].Text && other[1].Text == reqs[1].Text {
		t.Fatal("two seeds sent the same prompts in the same order: the shuffle ignores the seed")
	}
}

func TestGroupsRefuseNoPrompts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Profile, cfg.PromptsPerGroup = ProfileGroups, 0
	if err := cfg.Validate(); err == nil {
		t.Fatal("0 prompts per group validated")
	}
}
