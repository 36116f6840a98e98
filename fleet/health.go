package fleet

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// HealthPolicy says when an endpoint leaves and rejoins the candidates.
type HealthPolicy struct {
	// ActiveFailures consecutive failed active checks make an endpoint unhealthy, and
	// ActiveSuccesses consecutive passed ones make it healthy again. 0 means 2 each.
	ActiveFailures, ActiveSuccesses int
	// PassiveFailures consecutive failed responses (connect failure, 502, 503, 504)
	// eject an endpoint for Ejection, doubled on each ejection in a row up to
	// MaxEjection; a success resets both. 0 means 1 (the first failed response takes the
	// endpoint out of the next decision: decision 1132), 1 s and 30 s.
	PassiveFailures       int
	Ejection, MaxEjection time.Duration
}

func (p *HealthPolicy) setDefaults() {
	if p.ActiveFailures <= 0 {
		p.ActiveFailures = 2
	}
	if p.ActiveSuccesses <= 0 {
		p.ActiveSuccesses = 2
	}
	if p.PassiveFailures <= 0 {
		p.PassiveFailures = 1
	}
	if p.Ejection <= 0 {
		p.Ejection = time.Second
	}
	if p.MaxEjection <= 0 {
		p.MaxEjection = 30 * time.Second
	}
}

// Transition is one change of an endpoint's health, for logs and metrics.
type Transition struct {
	Addr    string
	Healthy bool
	Source  string // "active" or "passive"
	Reason  string
}

// Health is each endpoint's health from what the picker sees (passive: its requests'
// responses) and from active checks. It does no I/O: the caller feeds it observations at
// the times it passes. Endpoints never observed are healthy. Safe for concurrent use.
//
// Usable is asked on every decision, so with every endpoint healthy it costs one atomic
// load, whatever the fleet's size: the endpoints that may be unusable (actively down, or
// ejected and not passed since) are kept apart in down, and only when there are some does
// Usable look at each address.
type Health struct {
	pol   HealthPolicy
	mu    sync.Mutex
	eps   map[string]*health
	down  map[string]*health // the entries of eps with activeDown or ejectedUntil set
	ndown atomic.Int64       // len(down), for Usable to read without the lock
}

type health struct {
	activeDown            bool
	activeFails, activeOK int
	passiveFails          int
	ejections             int
	ejectedUntil          time.Time
	failedAt              time.Time // when the latest failed response was observed
}

// NewHealth returns a Health applying pol (zero fields take the defaults).
func NewHealth(pol HealthPolicy) *Health {
	pol.setDefaults()
	return &Health{pol: pol, eps: map[string]*health{}, down: map[string]*health{}}
}

// file puts e (addr's entry) in down or takes it out, as its state now says. Called with
// h.mu held after every change of an entry.
func (h *Health) file(addr string, e *health) {
	if e.activeDown || !e.ejectedUntil.IsZero() {
		h.down[addr] = e
	} else {
		delete(h.down, addr)
	}
	h.ndown.Store(int64(len(h.down)))
}

func (h *Health) get(addr string) *health {
	e := h.eps[addr]
	if e == nil {
		e = &health{}
		h.eps[addr] = e
	}
	return e
}

// Active records one active check of addr at now; it returns the transition it caused,
// if any.
func (h *Health) Active(addr string, ok bool, reason string, now time.Time) (Transition, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.get(addr)
	was := e.usable(now)
	if ok {
		e.activeFails, e.activeOK = 0, e.activeOK+1
		if e.activeDown && e.activeOK >= h.pol.ActiveSuccesses {
			e.activeDown = false
			e.passiveFails, e.ejections, e.ejectedUntil = 0, 0, time.Time{} // it answers its checks again
		}
	} else {
		e.activeOK, e.activeFails = 0, e.activeFails+1
		if e.activeFails >= h.pol.ActiveFailures {
			e.activeDown = true
		}
	}
	h.file(addr, e)
	if is := e.usable(now); is != was {
		return Transition{Addr: addr, Healthy: is, Source: "active", Reason: reason}, true
	}
	return Transition{}, false
}

// Passive records the outcome of one response from addr at now: ok false for a connect
// failure or a 502, 503 or 504. decided is when the request that response answers was
// routed (zero: not a routed request). A success from a request routed before addr's
// latest failure was observed says nothing of addr now (it was sent, or even answered,
// before that failure: a late answer of an engine since killed) and is ignored, so it
// neither ends an ejection nor resets the failure count.
func (h *Health) Passive(addr string, ok bool, reason string, decided, now time.Time) (Transition, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.get(addr)
	if ok && !decided.IsZero() && decided.Before(e.failedAt) {
		return Transition{}, false
	}
	was := e.usable(now)
	switch {
	case ok:
		e.passiveFails, e.ejections = 0, 0
		e.ejectedUntil = time.Time{}
	default:
		e.failedAt = now
		if e.passiveFails++; e.passiveFails >= h.pol.PassiveFailures && !now.Before(e.ejectedUntil) {
			d := h.pol.Ejection << min(e.ejections, 16)
			e.ejections++
			e.ejectedUntil = now.Add(min(d, h.pol.MaxEjection))
			e.passiveFails = 0
		}
	}
	h.file(addr, e)
	if is := e.usable(now); is != was {
		return Transition{Addr: addr, Healthy: is, Source: "passive", Reason: reason}, true
	}
	return Transition{}, false
}

func (e *health) usable(now time.Time) bool { return !e.activeDown && !now.Before(e.ejectedUntil) }

// Healthy reports whether addr may be routed to at now.
func (h *Health) Healthy(addr string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.eps[addr]
	return e == nil || e.usable(now)
}

// Usable returns the healthy endpoints of addrs at now, in order. When none is healthy it
// returns addrs unchanged and false: routing somewhere beats refusing everything (a fleet
// wide outage, or checks that are wrong). When every endpoint is healthy it returns addrs
// itself at the cost of one atomic load; otherwise it costs a lookup per address.
func (h *Health) Usable(addrs []string, now time.Time) ([]string, bool) {
	if h.ndown.Load() == 0 {
		return addrs, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i, a := range addrs {
		if e := h.down[a]; e != nil && !e.usable(now) {
			if out == nil {
				out = append(make([]string, 0, len(addrs)), addrs[:i]...)
			}
			continue
		}
		if out != nil {
			out = append(out, a)
		}
	}
	switch {
	case out == nil:
		return addrs, true
	case len(out) == 0:
		return addrs, false
	}
	return out, true
}

// Unhealthy returns the endpoints not healthy at now, sorted.
func (h *Health) Unhealthy(now time.Time) []string {
	if h.ndown.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for a, e := range h.down { // the others are usable
		if !e.usable(now) {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// Retain forgets every endpoint not in keep (it left the fleet).
func (h *Health) Retain(keep []string) {
	set := make(map[string]bool, len(keep))
	for _, a := range keep {
		set[a] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for a := range h.eps {
		if !set[a] {
			delete(h.eps, a)
			delete(h.down, a)
		}
	}
	h.ndown.Store(int64(len(h.down)))
}
