package workload

import (
	"math/rand/v2"
	"time"
)

// Groups (ProfileGroups) restate inference-perf's shared_prefix data type
// (kubernetes-sigs/inference-perf, inference_perf/datagen/shared_prefix_datagen.py),
// which the GIE and llm-d prefix-cache benchmarks run: Prefixes groups, each a
// system prompt from the pool, and PromptsPerGroup prompts per group, each its
// group's system prompt, a newline and a question of SuffixTokens unique to
// that prompt. The Prefixes x PromptsPerGroup prompts are shuffled once per
// seed and then sent in turn, over and over (prompt i mod n), so every prompt
// recurs once a cycle; requests of the same prompt share their Tokens slice.
// A prompt's question is drawn from (seed, prompt) alone, when it is first
// sent, so a seed costs what it sends, not the whole set. Arrivals are Poisson
// at Rate (with bursts, if asked for), like every profile here;
// inference-perf's constant-rate stages send evenly spaced.
func generateGroups(cfg Config, pool *Pool, seed uint64, rng *rand.Rand) []Request {
	type prompt struct {
		text string
		ids  []uint32
	}
	order := rng.Perm(cfg.Prefixes * cfg.PromptsPerGroup)
	built := make(map[int]prompt)
	out := make([]Request, cfg.Requests)
	var t float64
	for i := range out {
		t += rng.ExpFloat64() / cfg.Rate
		k := order[i%len(order)]
		g := k / cfg.PromptsPerGroup
		p, ok := built[k]
		if !ok {
			q, qids := fill(suffixTag(k), cfg.SuffixTokens, rand.New(rand.NewPCG(seed, 0x71000000+uint64(k))))
			p.ids = make([]uint32, 0, len(pool.tokens[g])+1+len(qids))
			p.ids = append(append(append(p.ids, pool.tokens[g]...), newlineID), qids...)
			p.text = pool.texts[g] + "\n" + q
			built[k] = p
		}
		out[i] = Request{
			Index:        i,
			PrefixID:     g,
			SendAt:       time.Duration(cfg.warp(t) * float64(time.Second)),
			Text:         p.text,
			Tokens:       p.ids,
			PrefixTokens: len(pool.tokens[g]),
			MaxTokens:    cfg.MaxTokens,
		}
	}
	return out
}
