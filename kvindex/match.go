package kvindex

import (
	"math"
	mbits "math/bits"
	"slices"
)

// Match is how much of a prompt one endpoint holds.
type Match struct {
	Matched    int // credited tokens of the contiguous cached prefix from the first block
	HolderRank int // order among the endpoints asked in which it stored the first block; -1 if it does not hold it
	Rank       int // the data-parallel rank that holds Matched (the earliest store on a tie); -1 if none
}

// Match returns, for each endpoint (aligned), the credited tokens of the longest
// contiguous prefix of tokens it holds in a credited tier, on its best rank (and which
// rank that is), and the order in which the holders of the first block stored it. It
// looks up the base model's unsalted blocks: MatchKey looks up an adapter's or a
// salt's.
//
// Match takes no lock, so events may be applied while it reads. What it credits was
// held: each block credited to a rank in a tier was held by that rank in that tier at
// some instant during the call, and each store order it ranks by was that rank's. It is
// not a snapshot of one instant (a chain being stored or removed meanwhile may be seen
// partly), just as an event applied in holds is seen partly by lookups between them.
// Without concurrent events the result is the index's state exactly.
//
// The stream's epoch is its salt, which no other stream ever has: a rank is credited
// only if its store order of block 0, keyed by its salt, is found after its blocks were
// read. That proves the rank still existed then, so the slot read was its own all along
// (a dropped stream never comes back; its slot may go to another stream only after it
// was dropped). A rank seen holding block 0 without a store order (block 0 removed
// meanwhile) makes the lookup look again; after two such tries, it looks under the
// writers' lock (docs/decisions/0805).
func (ix *Index) Match(tokens []uint32, endpoints []string) []Match {
	return ix.AppendMatch(make([]Match, 0, len(endpoints)), tokens, endpoints)
}

// AppendMatch is Match with the result appended to dst (one entry per endpoint, aligned
// from len(dst)). A caller that passes the same dst[:0] again makes a lookup allocate
// nothing (an allocated result costs a lookup a refill of the allocator's cache every
// few dozen lookups, and the collector's work; docs/decisions/0805).
func (ix *Index) AppendMatch(dst []Match, tokens []uint32, endpoints []string) []Match {
	return ix.AppendMatchKey(dst, tokens, Key{}, endpoints)
}

// MatchKey is Match of the blocks stored under k: a LoRA adapter's, or a cache_salt's
// (IndexConfig.ExtraKeys). Blocks of another adapter or salt, or of none, never match.
func (ix *Index) MatchKey(tokens []uint32, k Key, endpoints []string) []Match {
	return ix.AppendMatchKey(make([]Match, 0, len(endpoints)), tokens, k, endpoints)
}

// AppendMatchKey is MatchKey appended to dst, as AppendMatch.
func (ix *Index) AppendMatchKey(dst []Match, tokens []uint32, k Key, endpoints []string) []Match {
	root := ix.rootKey(k)
	dst = slices.Grow(dst, len(endpoints))
	out := dst[len(dst) : len(dst)+len(endpoints)]
	dst = dst[:len(dst)+len(endpoints)]
	sc := scratchPool.Get().(*matchScratch)
	defer scratchPool.Put(sc)
	sc.keys = sc.keys[:0] // hashed once per lookup, for every try
	for range 2 {
		if ix.match(tokens, root, endpoints, out, sc, false) {
			return dst
		}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.match(tokens, root, endpoints, out, sc, true)
	return dst
}

// match fills out from the tables as they are read. Unless locked (ix.mu read-locked:
// no writer), it reports false when it saw a rank hold block 0 without a store order.
func (ix *Index) match(tokens []uint32, root uint64, endpoints []string, out []Match, sc *matchScratch, locked bool) bool {
	dir := ix.dir.Load()
	for i := range out {
		out[i] = Match{HolderRank: -1, Rank: -1}
	}
	groups := ix.groupsFor(dir, endpoints, sc)
	stamps := append(sc.stamps[:0], make([]uint64, len(endpoints))...)
	sc.stamps = stamps
	// The tiers that hold anything, best credit first, and their arrays as they are now
	// (an array copied meanwhile keeps the state it was copied in).
	var act [numMedia]Medium
	var arrs [numMedia]*slotArray
	na := 0
	for _, m := range ix.order {
		if ix.held[m].NonEmpty() {
			act[na], na = m, na+1
			arrs[na-1] = ix.held[m].arr.Load()
		}
	}
	var credit [64]float64
	for gi := range groups {
		g := &groups[gi]
		keys := sc.keysFor(ix, tokens, root, g.bs)
		if len(keys) == 0 {
			continue
		}
		var alive uint64
		for _, w := range g.ws {
			alive |= w.s.bit()
		}
		clear(credit[:])
		// A run of blocks credited alike (the same slots by the same tiers) is credited
		// at once: a slot's credit changes only where its prefix ends, or where a tier
		// changes. That adds the same numbers when every tier's credit of a block is a
		// multiple of 2^-10 (sums exact in any order); otherwise, block by block.
		var cm [numMedia]float64
		exact := len(tokens) < 1<<40
		for a := range na {
			cm[a] = ix.credit[act[a]] * float64(g.bs)
			if x := cm[a] * 1024; x != math.Trunc(x) {
				exact = false
			}
		}
		var prev, cur [numMedia]uint64
		run := 0
		flush := func() {
			for a := range na {
				c := float64(run) * cm[a]
				for bits := prev[a]; bits != 0; bits &= bits - 1 {
					credit[mbits.TrailingZeros64(bits)] += c
				}
			}
		}
		rest := keys
		if na == 1 && exact && arrs[0] != nil {
			// One tier holds anything (a fleet without offloading), probed in a loop of
			// its own. A slot leaves the prefix once (alive only loses bits), so its
			// credit is the blocks before it left times the tier's credit of a block
			// (the same number as the runs' sum below: the credit is exact).
			sl := arrs[0].slots
			for j, k := range keys {
				wk := wordKey(k, g.word)
				var v uint64
				if wk <= tombKey {
					v, _ = ix.held[act[0]].get(wk)
				} else {
					for i := arrs[0].home(wk); ; {
						if k := sl[i].k.Load(); k == wk {
							v = sl[i].v.Load()
							break
						} else if k == emptyKey {
							break
						}
						if i++; i == len(sl) {
							i = 0
						}
					}
				}
				bits := v & alive
				for gone := alive &^ bits; gone != 0; gone &= gone - 1 {
					credit[mbits.TrailingZeros64(gone)] = float64(j) * cm[0]
				}
				if alive = bits; alive == 0 {
					break
				}
			}
			for ; alive != 0; alive &= alive - 1 {
				credit[mbits.TrailingZeros64(alive)] = float64(len(keys)) * cm[0]
			}
			rest = nil // probed
		}
		for _, k := range rest {
			wk := wordKey(k, g.word)
			var covered uint64
			for a := range na {
				var v uint64
				switch {
				case wk <= tombKey:
					v, _ = ix.held[act[a]].get(wk)
				case arrs[a] != nil:
					// arrs[a].lookup(wk), by hand: the call is most of a probe's cost.
					sl := arrs[a].slots
					for i := arrs[a].home(wk); ; {
						if k := sl[i].k.Load(); k == wk {
							v = sl[i].v.Load()
							break
						} else if k == emptyKey {
							break
						}
						if i++; i == len(sl) {
							i = 0
						}
					}
				}
				bits := v & alive &^ covered
				cur[a] = bits
				covered |= bits
			}
			if exact && cur == prev {
				run++
			} else {
				flush()
				prev, run = cur, 1
			}
			if alive = covered; alive == 0 {
				break
			}
		}
		flush()
		for _, w := range g.ws {
			m := int(math.Round(credit[w.s.slot%64]))
			if m == 0 || m < out[w.ep].Matched {
				continue
			}
			st, _ := ix.stamps.get(pair(keys[0], w.s.salt))
			if st == 0 && !locked {
				// Block 0 seen held, its store order not: the rank removed block 0, or
				// was dropped (its slot may then be another stream's), meanwhile.
				return false
			}
			if m == out[w.ep].Matched && st >= stamps[w.ep] {
				continue // a tie between ranks: the earlier store counts
			}
			out[w.ep].Matched, out[w.ep].Rank, stamps[w.ep] = m, w.s.rank, st
		}
	}
	ranked := sc.ranked[:0]
	for i := range out {
		if stamps[i] != 0 {
			ranked = append(ranked, i)
		}
	}
	sc.ranked = ranked
	slices.SortFunc(ranked, func(a, b int) int { return cmpU64(stamps[a], stamps[b]) })
	for r, i := range ranked {
		out[i].HolderRank = r
	}
	return true
}
