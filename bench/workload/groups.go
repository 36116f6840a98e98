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
// that prompt. The Prefixes x PromptsPerGroup prompts are made and shuffled
// once per seed and then sent in turn, over and over (prompt i mod n), so
// every prompt recurs once a cycle; requests of the same prompt share their
// Tokens slice. Arrivals are Poisson at Rate (with bursts, if asked for), like
// every profile here; inference-perf's constant-rate stages send evenly spaced.
func generateGroups(cfg Config, pool *Pool, rng *rand.Rand) []Request {
	type prompt struct {
		group int
		text  string
		ids   []uint32
	}
	prompts := make([]prompt, 0, cfg.Prefixes*cfg.PromptsPerGroup)
	for g := range cfg.Prefixes {
		for range cfg.PromptsPerGroup {
			q, qids := fill(suffixTag(len(prompts)), cfg.SuffixTokens, rng)
			ids := make([]uint32, 0, len(pool.tokens[g])+1+len(qids))
			ids = append(append(append(ids, pool.tokens[g]...), newlineID), qids...)
			prompts = append(prompts, prompt{group: g, text: pool.texts[g] + "\n" + q, ids: ids})
		}
	}
	rng.Shuffle(len(prompts), func(i, j int) { prompts[i], prompts[j] = prompts[j], prompts[i] })
	out := make([]Request, cfg.Requests)
	var t float64
	for i := range out {
		t += rng.ExpFloat64() / cfg.Rate
		p := prompts[i%len(prompts)]
		out[i] = Request{
			Index:        i,
			PrefixID:     p.group,
			SendAt:       time.Duration(cfg.warp(t) * float64(time.Second)),
			Text:         p.text,
			Tokens:       p.ids,
			PrefixTokens: len(pool.tokens[p.group]),
			MaxTokens:    cfg.MaxTokens,
		}
	}
	return out
}
