package picker

import (
	"context"

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
