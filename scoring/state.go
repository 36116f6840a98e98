package scoring

import (
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// QPSWindow is the sliding window of the QPS fallback, as in the Production Stack router,
// counted in whole seconds.
const QPSWindow = 60 * time.Second

// ringReplicas is the number of points each endpoint owns on the session hash ring.
const ringReplicas = 160

// State is the routing history that some policies need: the round-robin position, the
// requests sent to each endpoint (for the QPS fallback) and a cached session ring. The
// caller records every booked decision with Booked. State is safe for concurrent use.
type State struct {
	mu     sync.Mutex
	rrNext uint64
	sent   map[string]*rateWindow
	rings  map[string]*ring // by ringKey of the members; at most maxRings
	recent map[uint64]routed
	prefix *prefixTrie // prefixaware's, made on first use
	rng    uint64      // prefixaware's random choices (splitmix64 state)
	// uncached is ttftaware's mean uncached prompt of the requests booked on each
	// endpoint lately (Uncached), in tokens.
	uncached map[string]float64
	// allocated is ttftaware's count of the uncached prompt tokens booked on each endpoint
	// since the picker started (Uncached): the KV blocks those requests took there.
	allocated map[string]float64
	// allocatedAll is allocated summed over the fleet, forgotten endpoints included.
	allocatedAll float64
	// booked is ttftaware's record of the fleet's offered load (Offered).
	booked offered
	// chunks is ttftaware's record of where the chunks of the prompts routed with their
	// token ids went (recordChunks), by chained chunk hash.
	chunks map[uint64]heldChunk
	// lru is, by endpoint, the order its prefix cache evicts the chunks routed there
	// (recordChunks); lruTop is the last position any of them took, after which an
	// endpoint's new LRU starts.
	lru    map[string]*chunkLRU
	lruTop uint64
	// indexed is set once the cache index has shown a candidate holding a prompt
	// (presumeChunks): the chunks are then neither recorded nor read.
	indexed bool
	// chain is the chunk hashes of the prompt being decided (presumeChunks), read again when
	// it is recorded (recordChunks).
	chain chunkChain
	// pending is ttftaware's record of each endpoint's bookings before their first token
	// and of how long they took against their prediction (Pending, drain).
	pending map[string]*pendingRing
}

// offered is the rate of the bookings with a prefix key, of the uncached prompt tokens
// booked with them and of those of them recomputed after an eviction (remiss), per second,
// each decayed over HotTau as a prefix's rate is, as of at; mark is State.allocatedAll then.
// first is the first booking's time: the rates count the bookings since then only.
type offered struct {
	rate, tokens, remiss float64
	at, first            time.Time
	mark                 float64
}

// book adds one booking at now, with the uncached tokens booked since the last, remiss of
// them recomputed after an eviction; s.mu must be held.
func (s *State) book(now time.Time, remiss float64) {
	b := &s.booked
	f := 0.0
	if !b.at.IsZero() {
		f = math.Exp(-max(now.Sub(b.at), 0).Seconds() / HotTau.Seconds())
	} else {
		b.first = now
	}
	b.rate = b.rate*f + 1/HotTau.Seconds()
	b.tokens = b.tokens*f + (s.allocatedAll-b.mark)/HotTau.Seconds()
	b.remiss = b.remiss*f + remiss/HotTau.Seconds()
	b.at, b.mark = now, s.allocatedAll
}

// offered returns the fleet's bookings per second, their mean uncached prompt tokens and
// the share of those recomputed after an eviction, decayed over HotTau, as of now (0, 0, 0
// before the first); s.mu must be held.
func (s *State) offered(now time.Time) (rate, tokens, evicted float64) {
	b := s.booked
	if b.at.IsZero() || b.rate <= 0 {
		return 0, 0, 0
	}
	if b.tokens > 0 {
		evicted = min(b.remiss/b.tokens, 1)
	}
	return b.rate * math.Exp(-max(now.Sub(b.at), 0).Seconds()/HotTau.Seconds()), b.tokens / b.rate, evicted
}

// offeredMeasured says whether the fleet's offered load (offered) is measured as of now:
// its first booking is at least HotTau old. A rate decayed over HotTau that has counted
// for T seconds holds 1 - e^(-T/HotTau) of the bookings of its window, so a younger one
// reads low (at 2 s, a sixth); s.mu must be held.
func (s *State) offeredMeasured(now time.Time) bool {
	f := s.booked.first
	return !f.IsZero() && now.Sub(f) >= HotTau
}

// UncachedMemory is how many bookings State.Uncached's mean spans: it follows a change of
// workload within about that many requests to an endpoint.
const UncachedMemory = 16

// Uncached records that a request with tokens uncached prompt tokens was booked on addr
// (ttftaware's history: the work a request in prefill there still holds).
func (s *State) Uncached(addr string, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uncached == nil {
		s.uncached, s.allocated = map[string]float64{}, map[string]float64{}
	}
	s.allocated[addr] += float64(max(tokens, 0))
	s.allocatedAll += float64(max(tokens, 0))
	m, ok := s.uncached[addr]
	if !ok {
		s.uncached[addr] = float64(tokens)
		return
	}
	s.uncached[addr] = m + (float64(tokens)-m)/UncachedMemory
}

// trie returns prefixaware's trie; s.mu must be held.
func (s *State) trie() *prefixTrie {
	if s.prefix == nil {
		s.prefix = newPrefixTrie(prefixTrieNodes)
	}
	return s.prefix
}

// random returns a pseudo-random index in [0, n) from a fixed-seed generator, so equal
// decision sequences make equal choices; s.mu must be held.
func (s *State) random(n int) int {
	s.rng += 0x9e3779b97f4a7c15
	z := s.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(n))
}

// routed is where a prefix key last went and its recent request rate.
type routed struct {
	// route is the last: addr, and for ttftaware's presumption (presumption) the
	// prompt's length and the uncached tokens booked on addr before it.
	route
	at   time.Time
	rate float64 // requests per second, exponentially decayed over HotTau
	prev route   // the last route before it to another endpoint (zero: none)
	// markAll is State.allocatedAll when the key was last routed; between is the mean of
	// the uncached tokens booked on the fleet between two of its requests (over about
	// UncachedMemory of them), -1 until it has come twice (ttftaware's replica value).
	markAll, between float64
	// gap is the mean time between two of its requests, seconds, over as many.
	gap float64
	// least is the fewest uncached tokens any of its requests booked: its own suffix.
	least float64
	// shortest is the fewest tokens of any of its prompts (0: none known): what any two of
	// them that do not continue one another can share at most.
	shortest int
}

// route is a prompt of tokens tokens (0: not known) routed to addr after mark uncached
// tokens were booked there (State.allocated); tail is the hash of its last tokens
// (tailHash; 0: not known).
type route struct {
	addr   string
	tokens int
	mark   float64
	tail   uint64
	at     time.Time
}

// tailTokens is how many of a prompt's last tokens State keeps a hash of: one KV block
// (vLLM's block_size), enough that another prompt having them at the same place is one
// that continues it (a session's next turn), not one that happens to be as long.
const tailTokens = 16

// tailHash is the FNV-1a hash of prompt's last tokenCount tokens' last tailTokens (of
// them all when fewer), never 0; 0 when tokenCount is not within prompt.
func tailHash(prompt []uint32, tokenCount int) uint64 {
	if tokenCount <= 0 || tokenCount > len(prompt) {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, t := range prompt[max(tokenCount-tailTokens, 0):tokenCount] {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return h | 1
}

// maxRecent bounds the prefix keys latencyaware remembers; past it, keys idle longer
// than AffinityWindow are dropped, and if that frees nothing, all of them.
const maxRecent = 1 << 16

// Routed records that a prompt of tokens tokens (0: not known) with the prefix key went
// to addr at now (latencyaware's and ttftaware's history; key 0 records nothing). A
// caller that also records the request's uncached tokens (Uncached) does so first.
func (s *State) Routed(key uint64, addr string, tokens int, now time.Time) {
	if key == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routed(key, addr, tokens, 0, now)
}

// RoutedPrompt is Routed for a prompt whose token ids are known: ttftaware then tells
// whether a later prompt of the key continues this one (NeedsTokens), and records where
// the prompt's chunks went (recordChunks).
func (s *State) RoutedPrompt(key uint64, addr string, prompt []uint32, now time.Time) {
	if key == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routed(key, addr, len(prompt), tailHash(prompt, len(prompt)), now)
	s.recordChunks(key, addr, prompt)
}

// routed is Routed with the prompt's tail hash (0: not known); s.mu must be held.
func (s *State) routed(key uint64, addr string, tokens int, tail uint64, now time.Time) {
	if s.recent == nil {
		s.recent = map[uint64]routed{}
	}
	if len(s.recent) >= maxRecent {
		for k, r := range s.recent {
			if now.Sub(r.at) > AffinityWindow {
				delete(s.recent, k)
			}
		}
		if len(s.recent) >= maxRecent {
			clear(s.recent)
		}
	}
	r, seen := s.recent[key]
	// A prompt booked where its key was last routed, with more uncached than the least its
	// key ever booked (its own suffix), was evicted there and is recomputed.
	u, remiss := s.allocatedAll-s.booked.mark, 0.0
	switch {
	case !seen:
		r.least = u
	case addr == r.addr || addr == r.prev.addr:
		remiss = max(u-r.least, 0)
		fallthrough
	default:
		r.least = min(r.least, u)
	}
	s.book(now, remiss)
	switch d := s.allocatedAll - r.markAll; {
	case !seen:
		r.between = -1
	case r.between < 0:
		r.between, r.gap = d, max(now.Sub(r.at), 0).Seconds()
	default:
		r.between += (d - r.between) / UncachedMemory
		r.gap += (max(now.Sub(r.at), 0).Seconds() - r.gap) / UncachedMemory
	}
	r.markAll = s.allocatedAll
	r.rate = decayed(r, now) + 1/HotTau.Seconds()
	if r.addr != "" && r.addr != addr {
		r.prev = r.route
	}
	if tokens > 0 && (r.shortest == 0 || tokens < r.shortest) {
		r.shortest = tokens
	}
	r.route, r.at = route{addr: addr, tokens: max(tokens, 0), mark: s.allocated[addr], tail: tail, at: now}, now
	s.recent[key] = r
}

// decayed is r's rate as of now.
func decayed(r routed, now time.Time) float64 {
	if r.at.IsZero() {
		return 0
	}
	return r.rate * math.Exp(-max(now.Sub(r.at), 0).Seconds()/HotTau.Seconds())
}

// lastRouted returns where the key last went within AffinityWindow ("" if nowhere) and
// whether its prefix is hot (at least HotRate requests per second).
func (s *State) lastRouted(key uint64, now time.Time) (string, bool) {
	if key == 0 {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recent[key]
	if !ok || now.Sub(r.at) > AffinityWindow {
		return "", false
	}
	return r.addr, decayed(r, now) >= HotRate
}

// maxRings bounds the cached session rings (one per distinct candidate set, which subset
// hints can vary).
const maxRings = 16

// NewState returns empty history.
func NewState() *State {
	return &State{sent: map[string]*rateWindow{}, rings: map[string]*ring{}}
}

// Booked records that a request was sent to addr at now.
func (s *State) Booked(addr string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.sent[addr]
	if w == nil {
		w = &rateWindow{}
		s.sent[addr] = w
	}
	w.add(now)
}

// Forget drops the history of endpoints that are no longer in the fleet.
func (s *State) Forget(keep []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := make(map[string]bool, len(keep))
	for _, a := range keep {
		k[a] = true
	}
	for a := range s.sent {
		if !k[a] {
			delete(s.sent, a)
		}
	}
	for a := range s.uncached {
		if !k[a] {
			delete(s.uncached, a)
			delete(s.allocated, a)
		}
	}
	for a := range s.lru {
		if !k[a] {
			delete(s.lru, a)
		}
	}
	for a := range s.pending {
		if !k[a] {
			delete(s.pending, a)
		}
	}
}

// windowSeconds is QPSWindow in one-second buckets.
const windowSeconds = int64(QPSWindow / time.Second)

// rateWindow counts requests per second over the last windowSeconds seconds, in constant
// space whatever the rate.
type rateWindow struct {
	count [windowSeconds]uint32
	sec   [windowSeconds]int64 // the second each bucket counts
}

func (w *rateWindow) add(now time.Time) {
	s := now.Unix()
	i := s % windowSeconds
	if i < 0 {
		i += windowSeconds
	}
	if w.sec[i] != s {
		w.sec[i], w.count[i] = s, 0
	}
	w.count[i]++
}

// total returns the requests of the seconds (now-QPSWindow, now].
func (w *rateWindow) total(now time.Time) int {
	if w == nil {
		return 0
	}
	s, n := now.Unix(), 0
	for i := range w.sec {
		if w.sec[i] > s-windowSeconds && w.sec[i] <= s {
			n += int(w.count[i])
		}
	}
	return n
}

// nextRR returns the round-robin position and advances it.
func (s *State) nextRR() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.rrNext
	s.rrNext++
	return n
}

// qpsRank orders the candidates for the QPS fallback: endpoints that never received a
// request first, then the lowest request rate over QPSWindow, then by address. As every
// ranking, only its first in.prefix() entries are in order.
//
// The order is found by sortTop on a key put in Score for the while: neverKey for an
// endpoint that never received a request, else its score, -requests/QPSWindow, which is
// at most 0. Distinct keys differ by at least 1/60, far more than scoreEpsilon, so
// byScore's ties are exact ties, as in the order above. Then every neverKey is put back to
// the score it stands for.
func (s *State) qpsRank(in Input) []Ranked {
	rs := base(in, ReasonQPS)
	s.mu.Lock()
	for i := range rs {
		w := s.sent[rs[i].Addr]
		if w == nil {
			rs[i].Score = neverKey
			continue
		}
		rs[i].Score = -float64(w.total(in.Now)) / QPSWindow.Seconds()
	}
	s.mu.Unlock()
	sortTop(rs, in.prefix(), in.Sorted)
	for i := range rs {
		if rs[i].Score == neverKey {
			rs[i].Score = neverScore
		}
	}
	return rs
}

// neverKey orders an endpoint that never received a request before every other in
// qpsRank; its score is neverScore, what no requests give: -0/QPSWindow.
const neverKey = 1

var neverScore = math.Copysign(0, -1)

// sessionRank orders the candidates by the consistent-hash ring: the owner of the key
// first, then the next distinct endpoints clockwise.
func (s *State) sessionRank(in Input) []Ranked {
	rs := base(in, ReasonSession)
	addrs := make([]string, len(rs))
	for i, r := range rs {
		addrs[i] = r.Addr
	}
	key := ringKey(addrs)
	s.mu.Lock()
	r := s.rings[key]
	if r == nil {
		if len(s.rings) >= maxRings {
			clear(s.rings)
		}
		r = newRing(addrs)
		s.rings[key] = r
	}
	s.mu.Unlock()
	order := r.walk(in.Session)
	pos := make(map[string]int, len(order))
	for i, a := range order {
		pos[a] = i
	}
	for i := range rs {
		rs[i].Score = float64(len(order) - pos[rs[i].Addr])
	}
	sortByScore(in, rs)
	return rs
}

// fallback is the route of kvaware and loadaware when the cache says nothing useful:
// the session ring when the request has a session key, else the QPS fallback.
func (s *State) fallback(in Input) []Ranked {
	if in.Session != "" {
		return s.sessionRank(in)
	}
	return s.qpsRank(in)
}

// ring is a consistent hash ring: ringReplicas points per member, sorted by hash.
type ring struct {
	members []string // sorted
	points  []uint64
	owner   []string // owner[i] owns points[i]
}

func newRing(addrs []string) *ring {
	m := append([]string(nil), addrs...)
	sort.Strings(m)
	type pt struct {
		h uint64
		a string
	}
	pts := make([]pt, 0, len(m)*ringReplicas)
	for _, a := range m {
		for i := 0; i < ringReplicas; i++ {
			pts = append(pts, pt{hashString(a + "#" + strconv.Itoa(i)), a})
		}
	}
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].h != pts[j].h {
			return pts[i].h < pts[j].h
		}
		return pts[i].a < pts[j].a
	})
	r := &ring{members: m, points: make([]uint64, len(pts)), owner: make([]string, len(pts))}
	for i, p := range pts {
		r.points[i], r.owner[i] = p.h, p.a
	}
	return r
}

// ringKey names a member set independently of its order.
func ringKey(addrs []string) string {
	s := append([]string(nil), addrs...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// walk returns the distinct members clockwise from the key's point.
func (r *ring) walk(key string) []string {
	if len(r.points) == 0 {
		return nil
	}
	h := hashString(key)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
	seen := make(map[string]bool, len(r.members))
	out := make([]string, 0, len(r.members))
	for n := 0; n < len(r.points) && len(out) < len(r.members); n++ {
		a := r.owner[(i+n)%len(r.points)]
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// hashString is FNV-1a 64 followed by the splitmix64 finalizer, which spreads the
// near-identical strings of ring points evenly. Stable across processes and versions.
func hashString(s string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(s))
	z := f.Sum64()
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
