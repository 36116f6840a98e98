package picker

import (
	"context"
	"sync"

	"github.com/loadaware/loadaware-epp/lmcache"
)

// LMCacheView is the CacheView backed by the embedded LMCache controller's index:
// instances map to endpoints by IP (see lmcache.Index.MatchEndpoints).
type LMCacheView struct{ Index *lmcache.Index }

// Match implements CacheView.
func (v LMCacheView) Match(_ context.Context, tokens []uint32, endpoints []string) ([]CacheMatch, error) {
	ms := v.Index.MatchEndpoints(tokens, endpoints)
	out := make([]CacheMatch, len(ms))
	for i, m := range ms {
		out[i] = CacheMatch{Matched: m.Matched, HolderRank: m.HolderRank, Source: SourceLMCache}
	}
	return out, nil
}

// heldBufs holds the index's answers between MatchHeld calls, so a decision allocates
// nothing per holder.
var heldBufs = sync.Pool{New: func() any { return new([]lmcache.HeldMatch) }}

// MatchHeld implements HeldMatcher (see lmcache.Index.MatchHeldIn and MatchHeldExcept: the
// fleet's list is resolved once, so a lookup costs the chunks and holders only, with or
// without a subset or endpoints left out).
func (v LMCacheView) MatchHeld(_ context.Context, tokens []uint32, c Candidates, dst []Held) ([]Held, error) {
	buf := heldBufs.Get().(*[]lmcache.HeldMatch)
	defer heldBufs.Put(buf)
	if c.Subset == nil && c.Except != nil {
		*buf = v.Index.MatchHeldExcept((*buf)[:0], tokens, c.All, c.Except)
	} else {
		*buf = v.Index.MatchHeldIn((*buf)[:0], tokens, c.All, c.Subset)
	}
	for _, h := range *buf {
		dst = append(dst, Held{Endpoint: h.Endpoint, CacheMatch: CacheMatch{Matched: h.Matched, HolderRank: h.HolderRank, Source: SourceLMCache}})
	}
	return dst, nil
}
