package picker

import (
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/fleet"
)

// prefillTimes is the picker's measure of each endpoint's prefill from its own requests
// (enginemetrics.BookedSpeed): each booking is sent with the model's time for its work
// and heard to its first token (fleet.Hook). It is kept only for the policies that read
// it (scoring.NeedsPrefillTimes). It is safe for concurrent use.
type prefillTimes struct {
	now     func() time.Time
	mu      sync.Mutex
	eps     map[string]*enginemetrics.BookedSpeed
	entries sync.Pool // *prefillEntry, back in the pool once its booking is released
}

func newPrefillTimes(now func() time.Time) *prefillTimes {
	o := &prefillTimes{now: now, eps: make(map[string]*enginemetrics.BookedSpeed)}
	o.entries.New = func() any { return new(prefillEntry) }
	return o
}

// read is addr's measured booked slowdown and overlap; 0, 0 when not measured.
func (o *prefillTimes) read(addr string) (booked, overlap float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m := o.eps[addr]; m != nil {
		return m.Slowdown(), m.Overlap()
	}
	return 0, 0
}

// sent records a request booked on addr now whose work the model times at model seconds,
// and returns the hook that hears its first token and its release.
func (o *prefillTimes) sent(addr string, model float64) *prefillEntry {
	e := o.entries.Get().(*prefillEntry)
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.eps[addr]
	if m == nil {
		m = new(enginemetrics.BookedSpeed)
		o.eps[addr] = m
	}
	m.Sent(now)
	*e = prefillEntry{o: o, m: m, sent: now, model: model}
	return e
}

// forget drops the endpoints not in keep (their requests in flight end in the orphaned
// measures).
func (o *prefillTimes) forget(keep []string) {
	in := make(map[string]bool, len(keep))
	for _, a := range keep {
		in[a] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for a := range o.eps {
		if !in[a] {
			delete(o.eps, a)
		}
	}
}

// prefillEntry is one request in prefillTimes: a fleet.Hook. An entry whose first token was
// heard goes back to the pool at its release (its Decoding is then over: it set decoded
// under the lock the release takes); one released before its first token is left to the
// collector, as a Decoding racing its release may still read it.
type prefillEntry struct {
	o       *prefillTimes
	m       *enginemetrics.BookedSpeed
	sent    time.Time
	model   float64 // the model's time for its work, seconds
	decoded bool    // guarded by o.mu
	ended   bool    // guarded by o.mu
}

var _ fleet.Hook = (*prefillEntry)(nil)

// Decoding implements fleet.Hook: the request's first token.
func (e *prefillEntry) Decoding() {
	o := e.o
	now := o.now()
	o.mu.Lock()
	if !e.decoded && !e.ended {
		e.decoded = true
		e.m.FirstToken(e.sent, now, e.model)
	}
	o.mu.Unlock()
}

// Released implements fleet.Hook: a request released before its first token abandons it.
func (e *prefillEntry) Released() {
	o := e.o
	now := o.now()
	o.mu.Lock()
	if e.ended {
		o.mu.Unlock()
		return
	}
	e.ended = true
	reuse := e.decoded
	if !reuse {
		e.m.Abandoned(now)
	}
	o.mu.Unlock()
	if reuse {
		o.entries.Put(e)
	}
}

// bothHooks is two hooks of one booking, each hearing every call.
type bothHooks [2]fleet.Hook

func (h bothHooks) Decoding() { h[0].Decoding(); h[1].Decoding() }
func (h bothHooks) Released() { h[0].Released(); h[1].Released() }
