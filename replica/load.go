package replica

import (
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
)

// loadView turns the peers' booking messages and the engines' scraped counts into the
// remote share of each endpoint's load (fleet.Set.SetRemote).
//
// A peer's counts are its last KindState message plus its deltas since, applied in
// sequence (NATS keeps one publisher's order); a lost delta is healed by the next state.
// A peer silent for the timeout is dropped, with its bookings. The engines' scraped
// running+waiting counts bound the result from above: the remote share may not exceed
// the largest count of the last `keep` scrapes (the ceiling window), plus every booking
// made on the engine since the oldest of them was sent, less this picker's own in-flight
// requests. The window must outlast the engine's own lag, or real bookings are cut: an
// engine's gauges move once per step, and its API server streams a finished request's
// last tokens after the engine stopped counting it. While NATS is unreachable the last
// scrape plus the bookings since, less this picker's own, stands in for the peers.
type loadView struct {
	fleet   *fleet.Set
	met     *metrics
	timeout time.Duration
	keep    int // scrapes in the ceiling window (at least 2)

	mu       sync.Mutex
	peers    map[uint64]*peerLoad
	eng      map[string]*engineCount
	fallback bool // NATS is unreachable: the scraped counts stand in for the peers
}

type peerLoad struct {
	seq   uint64
	loads map[string]fleet.Load
	seen  time.Time
}

// engineCount is one endpoint's scraped counts and the bookings made on it.
type engineCount struct {
	scrapes    []scrapeRec // the last keep scrapes, oldest first
	books      uint64      // bookings seen on it, local and remote
	correction string      // the last correction applied, for counting changes once
}

// scrapeRec is one scrape's running+waiting and the bookings seen when it was sent.
type scrapeRec struct {
	count int
	books uint64
}

// newLoadView returns an empty view whose ceiling spans keep scrapes (at least 2).
func newLoadView(f *fleet.Set, met *metrics, timeout time.Duration, keep int) *loadView {
	return &loadView{fleet: f, met: met, timeout: timeout, keep: max(keep, 2), peers: map[uint64]*peerLoad{}, eng: map[string]*engineCount{}}
}

// ceilingScrapes is how many scrapes at the interval cover the window (and one more, so
// that the oldest was sent at least a window ago).
func ceilingScrapes(window, interval time.Duration) int {
	if interval <= 0 {
		return 2
	}
	return max(2, int((window+interval-1)/interval)+1)
}

func (v *loadView) engine(addr string) *engineCount {
	e := v.eng[addr]
	if e == nil {
		e = &engineCount{}
		v.eng[addr] = e
	}
	return e
}

// booked counts one local booking on addr (the scrape bound's allowance).
func (v *loadView) booked(addr string) {
	v.mu.Lock()
	v.engine(addr).books++
	v.mu.Unlock()
}

// apply takes one KindDelta or KindState message received at now and returns its outcome.
func (v *loadView) apply(m Message, now time.Time) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.peers[m.Origin]
	if p == nil {
		p = &peerLoad{loads: map[string]fleet.Load{}}
		v.peers[m.Origin] = p
		v.met.peers.Set(float64(len(v.peers)))
	}
	p.seen = now
	if p.seq != 0 && m.Seq <= p.seq {
		return outStale
	}
	out := outApplied
	switch m.Kind {
	case KindDelta:
		if p.seq != 0 && m.Seq != p.seq+1 {
			out = outGap // counts off until the next state
		}
		p.seq = m.Seq
		l := p.loads[m.Addr]
		l.Addr = m.Addr
		switch m.Op {
		case OpBook:
			l.Prefill++
			v.engine(m.Addr).books++
		case OpDecoding:
			l.Prefill, l.Decode = max(l.Prefill-1, 0), l.Decode+1
		case OpReleasePrefill:
			l.Prefill = max(l.Prefill-1, 0)
		case OpReleaseDecode:
			l.Decode = max(l.Decode-1, 0)
		}
		p.loads[m.Addr] = l
		v.recompute(m.Addr)
	case KindState:
		p.seq = m.Seq
		old := p.loads
		p.loads = make(map[string]fleet.Load, len(m.Loads))
		for _, l := range m.Loads {
			p.loads[l.Addr] = l
		}
		for a := range old {
			if _, ok := p.loads[a]; !ok {
				v.recompute(a)
			}
		}
		for a := range p.loads {
			v.recompute(a)
		}
	}
	return out
}

// expire drops the peers silent for longer than the timeout at now.
func (v *loadView) expire(now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	dropped := false
	for o, p := range v.peers {
		if now.Sub(p.seen) > v.timeout {
			delete(v.peers, o)
			v.met.expired.Inc()
			dropped = true
		}
	}
	v.met.peers.Set(float64(len(v.peers)))
	if dropped {
		v.recomputeAll()
	}
}

// setFallback says whether NATS is unreachable (the scrape stands in for the peers).
func (v *loadView) setFallback(on bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.fallback != on {
		v.fallback = on
		v.recomputeAll()
	}
}

// scrapeStarted notes the bookings made on addr before a scrape's request goes out.
func (v *loadView) scrapeStarted(addr string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.engine(addr).books
}

// scraped records addr's running+waiting from a scrape started when books was current.
func (v *loadView) scraped(addr string, count int, books uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.engine(addr)
	if len(e.scrapes) == v.keep {
		e.scrapes = append(e.scrapes[:0], e.scrapes[1:]...)
	}
	e.scrapes = append(e.scrapes, scrapeRec{count: count, books: books})
	v.recompute(addr)
}

// forget drops what is known of endpoints not in keep.
func (v *loadView) forget(keep []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	in := make(map[string]bool, len(keep))
	for _, a := range keep {
		in[a] = true
	}
	for a := range v.eng {
		if !in[a] {
			delete(v.eng, a)
		}
	}
}

func (v *loadView) recomputeAll() {
	seen := map[string]bool{}
	for _, p := range v.peers {
		for a := range p.loads {
			seen[a] = true
		}
	}
	for a := range v.eng {
		seen[a] = true
	}
	for _, a := range v.fleet.Endpoints() {
		seen[a] = true
	}
	for a := range seen {
		v.recompute(a)
	}
}

// recompute sets addr's remote load in the fleet. Called with v.mu held.
func (v *loadView) recompute(addr string) {
	var rp, rd int
	for _, p := range v.peers {
		l := p.loads[addr]
		rp += l.Prefill
		rd += l.Decode
	}
	e := v.eng[addr]
	kind := ""
	if e != nil && len(e.scrapes) > 0 {
		local := 0
		if ls := v.fleet.LocalLoads([]string{addr}); len(ls) == 1 {
			local = ls[0].InFlight()
		}
		switch last := e.scrapes[len(e.scrapes)-1]; {
		case v.fallback:
			rp, rd = 0, max(last.count+int(e.books-last.books)-local, 0)
			kind = "fallback"
		case len(e.scrapes) == v.keep:
			most := 0
			for _, sc := range e.scrapes {
				most = max(most, sc.count)
			}
			ceiling := max(most+int(e.books-e.scrapes[0].books)-local, 0)
			if excess := rp + rd - ceiling; excess > 0 {
				cut := min(excess, rd)
				rd -= cut
				rp -= excess - cut
				kind = "ceiling"
			}
		}
	}
	if e != nil && kind != e.correction {
		e.correction = kind
		if kind != "" {
			v.met.corrections.WithLabelValues(kind).Inc()
		}
	}
	v.fleet.SetRemote(addr, rp, rd)
}

// local returns this picker's own loads, the body of its KindState messages.
func (v *loadView) local() []fleet.Load { return v.fleet.LocalLoads(v.fleet.Endpoints()) }
