// Package fleet is the endpoint set and the per-endpoint load that this picker booked.
//
// A Set holds the current endpoints (from a static list or a discovery source that calls
// Update) and, for each, the requests in flight split into prefill (booked, no response
// byte yet) and decode (streaming the response). Counts change only through Bookings, so
// the load a policy sees is exactly what this picker has sent and not yet seen finish.
// fleet does no routing and no I/O.
package fleet

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ParseEndpoints parses a comma-separated list of "ip:port" (IPv6 as "[addr]:port") into
// canonical addresses, sorted. Host names are refused: Envoy's ORIGINAL_DST cluster needs
// an IP, and the LMCache controller maps engines to endpoints by IP.
func ParseEndpoints(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := CanonicalAddr(f)
		if err != nil {
			return nil, err
		}
		if seen[a] {
			return nil, fmt.Errorf("endpoint %s is listed twice: list each engine once", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("endpoint list is empty: pass --endpoints ip:port,... (e.g. 10.0.0.7:8000,10.0.0.8:8000)")
	}
	sort.Strings(out)
	return out, nil
}

// CanonicalAddr checks one "ip:port" and returns it in canonical form.
func CanonicalAddr(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("endpoint %q is not ip:port (IPv6 as [addr]:port): %v", s, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return "", fmt.Errorf("endpoint %q: %q is not an IP address; give the engine's IP (host names cannot be routed by Envoy's ORIGINAL_DST cluster nor matched to LMCache workers)", s, host)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("endpoint %q: port %q is not a number from 1 to 65535", s, port)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)).String(), nil
}

// IP returns the IP part of a canonical address.
func IP(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ""
	}
	return ap.Addr().String()
}

// Load is one endpoint's booked requests.
type Load struct {
	Addr    string
	Prefill int
	Decode  int
	// DecodePace is the endpoint's mean time from first token to release of recent requests
	// (an exponentially weighted mean); 0 until one is measured or without a clock (SetClock).
	DecodePace time.Duration
}

// InFlight is the policy's load: prefill + decode.
func (l Load) InFlight() int { return l.Prefill + l.Decode }

// endpoint is one endpoint's counters. What every decision reads (View.Load) comes first,
// in 48 bytes; pace's writer-only fields follow.
type endpoint struct {
	addr    string
	prefill atomic.Int64
	decode  atomic.Int64
	// remote is what other pickers booked here (SetRemote), packed as prefill<<32 | decode.
	remote atomic.Uint64
	pace   pace
	ranks  atomic.Pointer[[]rankLoad] // bookings per data-parallel rank (Booking.Pin); nil: none pinned yet
	// rankStamp is the stamp of the last Booking.RanksAt, whose loads the ranks' marks keep.
	rankStamp atomic.Int64

	set   *Set  // the set it was made for, whose load order it moves in
	place int32 // in set.order; -1 once it has left the set. Guarded by set.orderMu
	level int64 // its whole load as set.order counts it. Guarded by set.orderMu
}

// Set is the current endpoints and their loads. The zero value is not usable: call New.
// Set is safe for concurrent use.
type Set struct {
	mu     sync.RWMutex
	eps    map[string]*endpoint
	addrs  []string // sorted
	synced bool
	ready  chan struct{} // closed on the first Update
	clock  func() time.Time
	view   atomic.Pointer[View]

	listener atomic.Pointer[listenerBox] // told of every booking change; nil: none

	orderMu sync.Mutex // guards order and every endpoint's place and level (see order.go)
	order   *order     // the current View's load order
}

// New returns an empty Set that is not yet synced.
func New() *Set {
	s := &Set{eps: map[string]*endpoint{}, ready: make(chan struct{})}
	s.view.Store(&View{})
	return s
}

// Update replaces the endpoint set with addrs (canonical addresses). Endpoints that stay
// keep their loads; bookings on endpoints that left are dropped: their releases then
// change nothing, and an endpoint that comes back starts at zero. The first Update marks
// the Set synced.
func (s *Set) Update(addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	next := make(map[string]*endpoint, len(sorted))
	v := &View{addrs: sorted, eps: make([]*endpoint, len(sorted)), set: s}
	for i, a := range sorted {
		// New endpoints are allocated in address order, so a decision reading every
		// endpoint's counters in that order reads memory in order (adjacent allocations
		// of one size share spans).
		e, ok := s.eps[a]
		if !ok {
			e = &endpoint{addr: a, set: s, place: -1}
		}
		next[a], v.eps[i] = e, e
	}
	s.orderMu.Lock()
	for a, e := range s.eps {
		if _, stays := next[a]; !stays {
			e.place = -1
		}
	}
	levels := make([]int64, len(v.eps))
	for i, e := range v.eps {
		e.place, levels[i] = int32(i), e.level
	}
	v.ord = newOrder(levels)
	s.order = v.ord
	s.orderMu.Unlock()
	s.eps, s.addrs = next, sorted
	s.view.Store(v)
	if !s.synced {
		s.synced = true
		close(s.ready)
	}
}

// Endpoints returns the current endpoints, sorted. The caller owns the slice.
func (s *Set) Endpoints() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]string(nil), s.addrs...)
}

// Synced reports whether the endpoint set has been set at least once.
func (s *Set) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

// Ready is closed once the endpoint set is first known.
func (s *Set) Ready() <-chan struct{} { return s.ready }

// Loads returns the loads of the given endpoints that are still in the set, in the order
// given; endpoints no longer present are left out. A load is this picker's bookings plus
// what other pickers booked (SetRemote; zero for a single picker).
func (s *Set) Loads(addrs []string) []Load {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Load, 0, len(addrs))
	for _, a := range addrs {
		if e, ok := s.eps[a]; ok {
			rp, rd := unpackRemote(e.remote.Load())
			out = append(out, Load{Addr: a, Prefill: int(e.prefill.Load()) + rp, Decode: int(e.decode.Load()) + rd, DecodePace: e.pace.mean()})
		}
	}
	return out
}

// All returns every endpoint's load, sorted by address.
func (s *Set) All() []Load { return s.Loads(s.Endpoints()) }

// Book adds one request in prefill to addr. It fails when addr is not in the set.
func (s *Set) Book(addr string) (*Booking, error) { return s.BookTagged(addr, 0) }

// BookTagged is Book with a tag the set does not read but hands to the listener's Booked
// (the picker passes the prompt's prefix key, so that other replicas learn where it went).
func (s *Set) BookTagged(addr string, tag uint64) (*Booking, error) {
	s.mu.RLock()
	e, ok := s.eps[addr]
	clock := s.clock
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("fleet: endpoint %s is not in the endpoint set", addr)
	}
	e.prefill.Add(1)
	e.moved(1)
	b := &Booking{ep: e, clock: clock}
	if lb := s.listener.Load(); lb != nil {
		b.l = lb.l
		b.l.Booked(addr, tag)
	}
	return b, nil
}

// SetClock gives the set a clock, so that each endpoint's DecodePace is measured from its
// bookings' first tokens and releases. Without one no pace is measured.
func (s *Set) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = now
}

// Booking states.
const (
	inPrefill int32 = iota
	inDecode
	released
)

// Booking is one request counted on one endpoint. Its methods are safe to call from any
// goroutine, in any order, any number of times: the count moves prefill -> decode at
// most once and is removed exactly once.
type Booking struct {
	ep    *endpoint
	state atomic.Int32
	clock func() time.Time // nil: no pace measured
	first atomic.Int64     // unix nanoseconds of the first token; 0 before
	l     Listener         // nil: none
	hook  Hook             // nil: none
	rank  *rankLoad        // the data-parallel rank it is pinned to (Pin); nil: none
}

// Hook hears one booking's move to decode and its release, each at most once, from the
// call that does it (Booking.SetHook). It must be fast and must not block.
type Hook interface {
	Decoding()
	Released()
}

// SetHook makes h hear this booking's Decoding and Release from now on. It is not
// synchronised with them: set it before the booking is handed to whoever calls them.
func (b *Booking) SetHook(h Hook) { b.hook = h }

// TakeHook removes the booking's hook and returns it (nil when none), so that it can be
// moved to another booking of the same request before this one is released. Like SetHook,
// it must not race with Decoding or Release.
func (b *Booking) TakeHook() Hook {
	h := b.hook
	b.hook = nil
	return h
}

// Addr is the booked endpoint.
func (b *Booking) Addr() string { return b.ep.addr }

// Decoding moves the request from prefill to decode (its first response byte arrived).
// It does nothing after the first call or after Release.
func (b *Booking) Decoding() {
	if b.state.CompareAndSwap(inPrefill, inDecode) {
		b.ep.prefill.Add(-1)
		b.ep.decode.Add(1)
		if b.rank != nil {
			b.rank.prefill.Add(-1)
			b.rank.decode.Add(1)
		}
		if b.clock != nil {
			b.first.Store(b.clock().UnixNano())
		}
		if b.l != nil {
			b.l.Decoding(b.ep.addr)
		}
		if b.hook != nil {
			b.hook.Decoding()
		}
	}
}

// Release removes the request from its endpoint's load. It reports whether this call did
// it: true exactly once per Booking.
func (b *Booking) Release() bool {
	for {
		st := b.state.Load()
		if st == released {
			return false
		}
		if b.state.CompareAndSwap(st, released) {
			if b.rank != nil {
				b.rank.release(st == inPrefill)
			}
			if st == inPrefill {
				b.ep.prefill.Add(-1)
			} else {
				b.ep.decode.Add(-1)
				if f := b.first.Load(); f != 0 && b.clock != nil {
					b.ep.pace.observe(time.Duration(b.clock().UnixNano() - f))
				}
			}
			b.ep.moved(-1)
			if b.l != nil {
				b.l.Released(b.ep.addr, st == inDecode)
			}
			if b.hook != nil {
				b.hook.Released()
			}
			return true
		}
	}
}
