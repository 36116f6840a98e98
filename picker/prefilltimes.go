package picker

import (
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/fleet"
)

// prefillTimes is the picker's measure of each endpoint's prefill speed from its own
// requests (enginemetrics.BookedSpeed): each booking is sent with the model's time for its
// work and heard to its first token (fleet.Hook). It is kept only for the policies that
// read it (scoring.NeedsPrefillTimes). It is safe for concurrent use.
type prefillTimes struct {
	now func() time.Time
	mu  sync.Mutex
	eps map[string]*enginemetrics.BookedSpeed
}

func newPrefillTimes(now func() time.Time) *prefillTimes {
	return &prefillTimes{now: now, eps: make(map[string]*enginemetrics.BookedSpeed)}
}

// slowdown is addr's measured prefill slowdown; 0 when not measured.
func (t *prefillTimes) slowdown(addr string) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.eps[addr]; s != nil {
		return s.Slowdown()
	}
	return 0
}

// sent records a request booked on addr whose work the model times at model seconds, and
// returns the entry that hears its first token (as the booking's hook).
func (t *prefillTimes) sent(addr string, model float64) *prefillEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.eps[addr]
	if s == nil {
		s = new(enginemetrics.BookedSpeed)
		t.eps[addr] = s
	}
	s.Sent(t.now())
	return &prefillEntry{t: t, s: s, model: model}
}

// forget drops the endpoints not in keep (their entries end in the orphaned measures).
func (t *prefillTimes) forget(keep []string) {
	in := make(map[string]bool, len(keep))
	for _, a := range keep {
		in[a] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for a := range t.eps {
		if !in[a] {
			delete(t.eps, a)
		}
	}
}

// prefillEntry is one request in prefillTimes.
type prefillEntry struct {
	t     *prefillTimes
	s     *enginemetrics.BookedSpeed
	model float64
	done  bool // guarded by t.mu
}

var _ fleet.Hook = (*prefillEntry)(nil)

// Decoding implements fleet.Hook: the request's first token.
func (e *prefillEntry) Decoding() {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if !e.done {
		e.done = true
		e.s.FirstToken(e.t.now(), e.model)
	}
}

// Released implements fleet.Hook: a request released before its first token abandons it.
func (e *prefillEntry) Released() {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if !e.done {
		e.done = true
		e.s.Abandoned(e.t.now())
	}
}

// bothHooks is two hooks of one booking, each hearing every call.
type bothHooks [2]fleet.Hook

func (h bothHooks) Decoding() { h[0].Decoding(); h[1].Decoding() }
func (h bothHooks) Released() { h[0].Released(); h[1].Released() }
