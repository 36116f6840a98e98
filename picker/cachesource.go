package picker

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/loadaware/loadaware-epp/kvindex"
)

// The cache sources, as named by --cache-source and in the explain header.
const (
	SourceLMCache    = "lmcache"
	SourceVLLMEvents = "vllm-events"
	SourceBoth       = "both"
)

// ParseCacheSource checks a --cache-source value.
func ParseCacheSource(s string) (string, error) {
	switch strings.TrimSpace(s) {
	case SourceLMCache, SourceVLLMEvents, SourceBoth:
		return strings.TrimSpace(s), nil
	}
	return "", fmt.Errorf("unknown cache source %q: use lmcache (the embedded LMCache controller), vllm-events (vLLM's KV cache events) or both (the longer prefix per endpoint wins)", s)
}

// KeyedView is a CacheView that tells apart the blocks stored under a LoRA adapter or a
// cache_salt, as vLLM's prefix cache does (the engine folds both into its block hashes).
// The picker asks MatchKey for a request with an adapter or a salt, Match otherwise.
type KeyedView interface {
	CacheView
	// MatchKey is Match of the blocks stored under k only (the zero Key: Match).
	MatchKey(ctx context.Context, tokens []uint32, k kvindex.Key, endpoints []string) ([]CacheMatch, error)
}

// KVEventsView is the CacheView backed by the index of vLLM's KV cache events: blocks
// are credited to the endpoint whose engine published them. With Ranks > 1 (the
// engines' data-parallel size behind one port) a match names the rank that holds the
// prefix (CacheMatch.PinRank), so the request can be pinned to it.
type KVEventsView struct {
	Index *kvindex.Index
	Ranks int
}

// Match implements CacheView.
func (v KVEventsView) Match(ctx context.Context, tokens []uint32, endpoints []string) ([]CacheMatch, error) {
	return v.MatchKey(ctx, tokens, kvindex.Key{}, endpoints)
}

// MatchKey implements KeyedView: only blocks stored under k's adapter and salt match
// (indexed so only with kvindex.IndexConfig.ExtraKeys; without it none do).
func (v KVEventsView) MatchKey(_ context.Context, tokens []uint32, k kvindex.Key, endpoints []string) ([]CacheMatch, error) {
	bp := kvMatchBufs.Get().(*[]kvindex.Match)
	defer kvMatchBufs.Put(bp)
	ms := v.Index.AppendMatchKey((*bp)[:0], tokens, k, endpoints)
	*bp = ms
	out := make([]CacheMatch, len(ms))
	for i, m := range ms {
		out[i] = CacheMatch{Matched: m.Matched, HolderRank: m.HolderRank, Source: SourceVLLMEvents}
		if v.Ranks > 1 && m.Rank >= 0 {
			out[i].PinRank = m.Rank + 1
		}
	}
	return out, nil
}

// kvMatchBufs holds the index's answers while they are copied into CacheMatches, so
// that a lookup allocates only the CacheMatches.
var kvMatchBufs = sync.Pool{New: func() any { return new([]kvindex.Match) }}

// Longest combines cache views: each endpoint gets the match of the view that holds the
// longer contiguous prefix for it (the first view on a tie). A view that fails is left
// out; Match fails only when every view does.
type Longest []CacheView

// Match implements CacheView.
func (l Longest) Match(ctx context.Context, tokens []uint32, endpoints []string) ([]CacheMatch, error) {
	return l.MatchKey(ctx, tokens, kvindex.Key{}, endpoints)
}

// MatchKey implements KeyedView: the views that are KeyedViews are asked for k's blocks,
// the others (LMCache, whose keys carry no adapter: LMCache#2961, vllm#44250) for their
// Match, which is what such an engine's connector would load for the request.
func (l Longest) MatchKey(ctx context.Context, tokens []uint32, k kvindex.Key, endpoints []string) ([]CacheMatch, error) {
	var out []CacheMatch
	var errs []string
	for _, v := range l {
		var ms []CacheMatch
		var err error
		if kv, ok := v.(KeyedView); ok {
			ms, err = kv.MatchKey(ctx, tokens, k, endpoints)
		} else {
			ms, err = v.Match(ctx, tokens, endpoints)
		}
		if err == nil && len(ms) != len(endpoints) {
			err = fmt.Errorf("%d matches for %d endpoints", len(ms), len(endpoints))
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if out == nil {
			out = ms
			continue
		}
		for i, m := range ms {
			if m.Matched > out[i].Matched {
				out[i] = m
			}
		}
	}
	if out == nil && len(l) > 0 {
		return nil, fmt.Errorf("every cache source failed: %s", strings.Join(errs, "; "))
	}
	if out == nil {
		return NoCache{}.Match(ctx, tokens, endpoints)
	}
	return out, nil
}
