package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// The published cell protocol (the experiment's run scripts, as described with
// its measurements): a cold fleet, a warm-up of WarmupPasses passes over the
// prefix pool in prefix order with at most WarmupInFlight requests in flight
// and WarmupMaxTokens output tokens, routed by the cell's own policy; then the
// seeds back to back on the same engines.
const (
	WarmupPasses    = 2
	WarmupInFlight  = 4
	WarmupMaxTokens = 4
)

// warmupTag is "[WARMUP-<pass>-<iii>] summarize:": the published warm-up
// prompt's tail after the prefix and a newline (12 tokens here; the
// published engines stored 1,556 tokens per warm-up prompt, 1,544 + 12).
func warmupTag(pass, i int) []piece {
	t := []piece{charPiece('['), {"WARMUP", warmupID}, charPiece('-')}
	t = append(t, digits(fmt.Sprintf("%d", pass))...)
	t = append(t, charPiece('-'))
	t = append(t, digits(fmt.Sprintf("%03d", i))...)
	return append(t, charPiece(']'), piece{" summarize", summarizeID}, charPiece(':'))
}

// Warmup returns one warm-up pass: one request per prefix, in prefix order,
// prompt = prefix + "\n" + "[WARMUP-<pass>-<iii>] summarize:", WarmupMaxTokens
// output tokens. SendAt is zero: the caller paces them (WarmupInFlight at a
// time).
func Warmup(cfg Config, pool *Pool, pass int) ([]Request, error) {
	if !cfg.HasPool() || pool == nil || pool.Len() != cfg.Prefixes {
		return nil, errors.New("workload: the warm-up needs a profile with a prefix pool (shared or chat) and that pool: build it with NewPool(cfg)")
	}
	out := make([]Request, pool.Len())
	for i := range out {
		tag := warmupTag(pass, i)
		r := Request{Index: i, PrefixID: i, MaxTokens: WarmupMaxTokens}
		if cfg.Adapters > 0 {
			r.Adapter = AdapterName(i % cfg.Adapters)
		}
		head := pool.tokens[i]
		r.Tokens = make([]uint32, 0, len(head)+1+len(tag))
		r.Tokens = append(r.Tokens, head...)
		r.Tokens = append(r.Tokens, newlineID)
		text := pool.texts[i] + "\n"
		for _, p := range tag {
			r.Tokens = append(r.Tokens, p.id)
			text += p.text
		}
		r.Text = text
		r.PrefixTokens = len(head)
		out[i] = r
	}
	return out, nil
}

// Replay returns a seed's requests with a given prefix sequence and send
// offsets (a measured seed's `prefix_id` column and send times): request i
// uses prefix prefixIDs[i], is sent at sendAt[i] from the seed's start, and
// gets a unique suffix drawn from seed, as Generate draws them.
func Replay(cfg Config, pool *Pool, seed uint64, prefixIDs []int, sendAt []time.Duration) ([]Request, error) {
	if cfg.Profile != ProfileShared || pool == nil || pool.Len() != cfg.Prefixes {
		return nil, errors.New("workload: a replay needs the shared profile and its pool: build it with NewPool(cfg)")
	}
	if len(prefixIDs) != len(sendAt) || len(prefixIDs) == 0 {
		return nil, fmt.Errorf("workload: replay of %d prefix ids and %d send times: need the same number, at least one", len(prefixIDs), len(sendAt))
	}
	rng := rand.New(rand.NewPCG(seed, 0x7265706c))
	out := make([]Request, len(prefixIDs))
	for i, id := range prefixIDs {
		if id < 0 || id >= pool.Len() {
			return nil, fmt.Errorf("workload: replay request %d: prefix id %d is outside the pool of %d", i, id, pool.Len())
		}
		if i > 0 && sendAt[i] < sendAt[i-1] {
			return nil, fmt.Errorf("workload: replay request %d is sent at %v, before request %d (%v): send times must not decrease", i, sendAt[i], i-1, sendAt[i-1])
		}
		head := pool.tokens[id]
		sufText, suf := fill(suffixTag(i), cfg.SuffixTokens, rng)
		r := Request{Index: i, PrefixID: id, SendAt: sendAt[i], MaxTokens: cfg.MaxTokens, PrefixTokens: len(head)}
		if cfg.Adapters > 0 {
			r.Adapter = AdapterName(id % cfg.Adapters)
		}
		r.Text = pool.texts[id] + "\n" + sufText
		r.Tokens = make([]uint32, 0, len(head)+1+len(suf))
		r.Tokens = append(r.Tokens, head...)
		r.Tokens = append(r.Tokens, newlineID)
		r.Tokens = append(r.Tokens, suf...)
		out[i] = r
	}
	return out, nil
}
