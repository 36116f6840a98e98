package lmcache

import (
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// Matching a prompt: walk its chunk keys, following the instances that hold the first
// chunk while they stay contiguous. The walk costs the holders it meets (each holder of
// each chunk is read once), not candidates x holders: per-instance progress lives in
// scratch indexed by the instance's dense number.

// cand is one instance in a walk.
type cand struct {
	iv     *instView
	chunks int32 // contiguous chunks held from the first
}

// lookupScratch is one lookup's working memory, reused through Index.scratch.
type lookupScratch struct {
	holders []uint32
	prev    []uint32 // the previous chunk's holders
	cands   []cand
	marks   []mark // by dense number
	walk    uint32
}

// mark is where the walk numbered walk put an instance in cands.
type mark struct {
	walk uint32
	at   int32
}

// enter returns the place of iv's entry in cands for this walk, or -1 when iv is not a
// candidate; with add, a new candidate is made.
func (sc *lookupScratch) enter(iv *instView, add bool) int {
	n := int(iv.n)
	if n >= len(sc.marks) {
		if !add {
			return -1
		}
		sc.marks = append(sc.marks, make([]mark, max(n+1, 2*len(sc.marks))-len(sc.marks))...)
	}
	if m := sc.marks[n]; m.walk == sc.walk {
		if sc.cands[m.at].iv == iv {
			return int(m.at)
		}
		return -1 // a number reused while this walk ran: the newer instance is not followed
	}
	if !add {
		return -1
	}
	sc.marks[n] = mark{walk: sc.walk, at: int32(len(sc.cands))}
	sc.cands = append(sc.cands, cand{iv: iv, chunks: 1})
	return len(sc.cands) - 1
}

// extend credits run more chunks to the candidates contiguous through chunk from-1 (those
// holding from chunks): the chunks from, from+1, ... had the same holders as chunk from-1.
func (sc *lookupScratch) extend(from, run int) {
	if run == 0 {
		return
	}
	for j := range sc.cands {
		if c := &sc.cands[j]; int(c.chunks) == from {
			c.chunks += int32(run)
		}
	}
}

func (ix *Index) getScratch() *lookupScratch {
	sc := ix.scratch.Get().(*lookupScratch)
	sc.walk++
	if sc.walk == 0 { // wrapped: no stale mark may equal a new walk
		clear(sc.marks)
		sc.walk = 1
	}
	sc.cands = sc.cands[:0]
	return sc
}

// Lookup returns, for every credited instance holding the first chunk of tokens, its
// contiguous matched prefix (see LookupKeys).
func (ix *Index) Lookup(tokens []uint32) []Match {
	var buf [16]int64
	return ix.LookupKeys(ix.lookupKeys(buf[:0], tokens), len(tokens))
}

// LookupKeys is Lookup for chunk keys already computed from a prompt of promptTokens
// tokens. An instance's credit ends at its first missing chunk; the walk stops when no
// instance is still contiguous. Credited instances have a known IP that no newer instance
// has claimed and that no second live instance reports. The result is ordered by Tokens
// (longest first), then HolderRank; it is empty when nobody holds the first chunk.
func (ix *Index) LookupKeys(keys []int64, promptTokens int) []Match {
	sc := ix.getScratch()
	defer ix.scratch.Put(sc)
	ix.walk(sc, keys, promptTokens)
	if len(sc.cands) == 0 {
		return nil
	}
	out := make([]Match, len(sc.cands))
	for i, c := range sc.cands {
		out[i] = Match{InstanceID: c.iv.id, IP: c.iv.ip, Tokens: ix.tokens(c, promptTokens), HolderRank: i}
	}
	slices.SortFunc(out, func(a, b Match) int {
		if a.Tokens != b.Tokens {
			return b.Tokens - a.Tokens
		}
		return a.HolderRank - b.HolderRank
	})
	return out
}

func (ix *Index) tokens(c cand, promptTokens int) int {
	return min(int(c.chunks)*ix.chunk, promptTokens)
}

// walk leaves in sc.cands every credited instance holding keys[0], in the order they
// stored it (their HolderRank), each with the contiguous chunks it holds, and records the
// lookup's metrics.
func (ix *Index) walk(sc *lookupScratch, keys []int64, promptTokens int) {
	start := time.Now()
	v := ix.view.Load()
	walked := 0 // keys some candidate still held
	slack, clock := ix.touchSlack(), ix.tick.Load()
	var stale uint64 // keys (of the first 64) whose use stamp is older than slack
	// A run of chunks held by the same holders as the chunk before it (a shared prefix
	// usually is) is counted, not walked: whoever was contiguous at its start stays so
	// through it, and is credited once when it ends (sc.extend).
	run, lastAlive := 0, 0
	for i, k := range keys {
		var used uint32
		sc.prev, sc.holders = sc.holders, sc.prev
		sc.holders, used = ix.holdersOf(k, sc.holders[:0])
		if i < 64 && slack > 0 && clock-used >= slack {
			stale |= 1 << i
		}
		alive := 0
		switch {
		case i > 0 && slices.Equal(sc.holders, sc.prev):
			run++
			alive = lastAlive
		default:
			sc.extend(i-run, run)
			run = 0
			for _, s := range sc.holders {
				iv := v.get(s)
				if iv == nil {
					continue
				}
				j := sc.enter(iv, i == 0)
				if j < 0 {
					continue
				}
				// An instance holding the key in several slots counts once; one that
				// missed a key before is no longer contiguous.
				if c := &sc.cands[j]; i > 0 && int(c.chunks) == i {
					c.chunks++
					alive++
				}
			}
			if i == 0 {
				alive = len(sc.cands)
			}
		}
		if alive == 0 {
			break
		}
		walked, lastAlive = i+1, alive
	}
	sc.extend(walked-run, run)
	if stale != 0 && len(sc.cands) > 0 {
		ix.renew(keys[:walked], stale)
	}
	best := 0
	for _, c := range sc.cands {
		best = max(best, ix.tokens(c, promptTokens))
	}
	ix.met.lookups.Inc()
	if len(sc.cands) > 0 {
		ix.met.hits.Inc()
	}
	if promptTokens > 0 {
		ix.met.matched.Observe(float64(best) / float64(promptTokens))
	}
	ix.met.latency.Observe(time.Since(start).Seconds())
}

// EndpointMatch is how much of a prompt one endpoint holds.
type EndpointMatch struct {
	Matched    int // contiguous prefix, in tokens
	HolderRank int // the instance's Match.HolderRank; -1 when it holds nothing
}

// HeldMatch is the match of the endpoint at Endpoint (its place in the list looked up).
type HeldMatch struct {
	Endpoint int
	EndpointMatch
}

// MatchEndpoints looks tokens up and aligns the result with endpoints ("ip:port"),
// mapping instances to endpoints by IP. Endpoints that share one IP, and endpoints given
// by host name, cannot be told apart by an instance's IP: they get no credit, and each is
// logged once as a configuration error. See MatchHeld for the cost.
func (ix *Index) MatchEndpoints(tokens []uint32, endpoints []string) []EndpointMatch {
	out := make([]EndpointMatch, len(endpoints))
	for i := range out {
		out[i].HolderRank = -1
	}
	for _, h := range ix.MatchHeld(nil, tokens, endpoints) {
		out[h.Endpoint] = h.EndpointMatch
	}
	return out
}

// MatchHeld is MatchEndpoints reporting only the endpoints that get credit, appended to
// dst in HolderRank order. The index remembers the last endpoint list it resolved (IPs
// parsed, shared IPs found): called again with the same slice (same array, same length),
// a lookup costs the prompt's chunks and the holders met, nothing per endpoint. A caller
// must therefore not change a list's contents once passed; a new list is resolved once,
// in time linear in its length.
func (ix *Index) MatchHeld(dst []HeldMatch, tokens []uint32, endpoints []string) []HeldMatch {
	return ix.MatchHeldIn(dst, tokens, endpoints, nil)
}

// MatchHeldIn is MatchHeld over the endpoints all[subset[0]], all[subset[1]], ...
// (subset ascending; nil means all of them, empty none), answering exactly as MatchHeld of that
// shorter list would: Endpoint is the place in subset, and IPs count as shared when they
// are shared within the subset. all is resolved once, as in MatchHeld, so a decision
// among some of a fleet's endpoints (a subset hint, an endpoint ejected) costs
// O(log len(subset)) per holder instead of resolving a new list.
func (ix *Index) MatchHeldIn(dst []HeldMatch, tokens []uint32, all []string, subset []int32) []HeldMatch {
	return ix.matchHeld(dst, tokens, all, subset, false)
}

// MatchHeldExcept is MatchHeldIn over every endpoint of all but all[except[0]],
// all[except[1]], ... (except ascending; nil or empty: none left out): it answers exactly as
// MatchHeldIn with the complement of except as the subset. A holder costs O(log
// len(except)) rather than O(log len(subset)), so leaving a few endpoints of a large fleet
// out (the unhealthy) costs about what asking about all of them does.
func (ix *Index) MatchHeldExcept(dst []HeldMatch, tokens []uint32, all []string, except []int32) []HeldMatch {
	return ix.matchHeld(dst, tokens, all, except, true)
}

// matchHeld is MatchHeldIn over the endpoints places names: all of them but places when
// excepting, else places (nil: all).
func (ix *Index) matchHeld(dst []HeldMatch, tokens []uint32, all []string, places []int32, excepting bool) []HeldMatch {
	var buf [16]int64
	keys := ix.lookupKeys(buf[:0], tokens)
	sc := ix.getScratch()
	defer ix.scratch.Put(sc)
	ix.walk(sc, keys, len(tokens))
	if len(sc.cands) == 0 {
		return dst
	}
	member := askedAbout{places, excepting}.place
	es := ix.endpointsFor(all)
	for _, i := range es.hostnames {
		if member(i) >= 0 {
			ix.logEndpointOnce(all[i], "lmcache: an endpoint given by host name cannot be matched to an LMCache instance (instances report their IP): list endpoints by IP; it gets no cache credit")
		}
	}
	for rank, c := range sc.cands {
		i := es.placeOf(c.iv)
		if i == notListed {
			continue
		}
		at := -1
		if i >= 0 {
			at = member(int(i))
		} else {
			// Shared in all: it is shared among the endpoints asked about only if two of
			// them have it.
			var in []int
			for _, j := range es.shared[c.iv.ip] {
				if member(j) >= 0 {
					in = append(in, j)
				}
			}
			if len(in) == 1 {
				at = member(in[0])
			}
			if len(in) > 1 {
				for _, j := range in {
					ix.logEndpointOnce(all[j], "lmcache: several endpoints share one IP, so an LMCache instance's IP does not say which of them it is: give each engine its own IP; they get no cache credit")
				}
			}
		}
		if at < 0 {
			continue
		}
		dst = append(dst, HeldMatch{Endpoint: at, EndpointMatch: EndpointMatch{Matched: ix.tokens(c, len(tokens)), HolderRank: rank}})
	}
	return dst
}

// askedAbout names the endpoints of a list a match is asked about: all of them when
// places is nil, else all but places when excepting, else places (ascending).
type askedAbout struct {
	places    []int32
	excepting bool
}

// place returns the place of the list's endpoint i among those asked about, or -1.
func (a askedAbout) place(i int) int {
	if a.places == nil {
		return i
	}
	j, in := slices.BinarySearch(a.places, int32(i))
	switch {
	case a.excepting && in:
		return -1
	case a.excepting:
		return i - j
	case in:
		return j
	}
	return -1
}

// endpointSet is an endpoint list resolved to the IPs instances report.
type endpointSet struct {
	list      []string
	byIP      map[string]int32 // canonical IP -> place in list; -1 when several endpoints share it
	shared    map[string][]int // the places of the endpoints sharing each shared IP
	hostnames []int            // places of endpoints given by host name
	byNumber  []atomic.Pointer[placed]
}

// placed is a credited instance resolved to its endpoint: its place in the list, -1 when
// several endpoints share its IP, notListed when none has it.
type placed struct {
	iv *instView
	at int32
}

const notListed = -2

// placeOf resolves iv to its endpoint, once per instance and list: later lookups read
// the answer by the instance's dense number.
func (es *endpointSet) placeOf(iv *instView) int32 {
	n := int(iv.n)
	if n < len(es.byNumber) {
		if p := es.byNumber[n].Load(); p != nil && p.iv == iv {
			return p.at
		}
	}
	at, ok := es.byIP[iv.ip]
	if !ok {
		at = notListed
	}
	if n < len(es.byNumber) {
		es.byNumber[n].Store(&placed{iv: iv, at: at})
	}
	return at
}

// endpointsFor returns the resolution of endpoints, reusing the last one when endpoints
// is the same slice.
func (ix *Index) endpointsFor(endpoints []string) *endpointSet {
	if es := ix.endpoints.Load(); es != nil && len(es.list) == len(endpoints) &&
		(len(endpoints) == 0 || &es.list[0] == &endpoints[0]) {
		return es
	}
	es := &endpointSet{list: endpoints, byIP: make(map[string]int32, len(endpoints)), shared: map[string][]int{},
		byNumber: make([]atomic.Pointer[placed], ix.numbers.Load()+64)}
	for i, e := range endpoints {
		ip := canonicalIP(e)
		if _, err := netip.ParseAddr(ip); err != nil {
			es.hostnames = append(es.hostnames, i)
			continue
		}
		if j, dup := es.byIP[ip]; dup {
			if j >= 0 {
				es.shared[ip] = append(es.shared[ip], int(j))
			}
			es.shared[ip] = append(es.shared[ip], i)
			es.byIP[ip] = -1
			continue
		}
		es.byIP[ip] = int32(i)
	}
	ix.endpoints.Store(es)
	return es
}

func (ix *Index) logEndpointOnce(endpoint, msg string) {
	if _, seen := ix.endpointLogged.LoadOrStore(endpoint, true); !seen {
		ix.log.Error(msg, "endpoint", endpoint)
	}
}

// Routed tells the index's MissDetector (if any) that a prompt with these token ids was
// sent to endpoint ("ip:port"). It has the shape of the picker's decision observer. The
// prompt's chunk keys are the last lookup's when it looked up the same tokens (keyMemo),
// else hashed here; either way Routed allocates nothing for a prompt of up to 16 chunks.
func (ix *Index) Routed(endpoint string, tokens []uint32) {
	if ix.det == nil || len(tokens) == 0 {
		return
	}
	var buf [16]int64
	keys, ok := ix.memo.appendKeys(buf[:0], tokens)
	if !ok {
		keys = ix.hasher.AppendChunkKeys(buf[:0], tokens)
	}
	ix.det.Sent(endpoint, keys)
}

// lookupKeys appends the chunk keys of tokens to dst and, when a MissDetector will want
// them again from Routed, remembers them.
func (ix *Index) lookupKeys(dst []int64, tokens []uint32) []int64 {
	keys := ix.hasher.AppendChunkKeys(dst, tokens)
	if ix.det != nil {
		ix.memo.store(tokens, keys)
	}
	return keys
}

func isUsableIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && !a.IsUnspecified()
}
