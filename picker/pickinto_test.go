package picker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// snapshot is a deep copy of what a Decision's memory holds (its Booking left out).
func snapshot(d Decision) Decision {
	d.Ranked = slices.Clone(d.Ranked)
	d.Endpoints = slices.Clone(d.Endpoints)
	d.Sources = maps.Clone(d.Sources)
	d.Booking = nil
	return d
}

// PickInto decides as Pick does, whatever d held before; a Decision handed back to it is
// reused, never shared: a decision made into one Decision does not change another, nor a
// Decision Pick returned.
func TestPickIntoDecidesAsPickWithoutAliasing(t *testing.T) {
	bf := newBenchFleet(t, 300, 100)
	cold := make([]uint32, 600) // a prompt nobody holds: no sources, the QPS fallback
	for i := range cold {
		cold[i] = uint32(7 + i)
	}
	for _, policy := range []string{"loadaware", "kvaware", "leastload", "sglang-cache-aware"} {
		t.Run(policy, func(t *testing.T) {
			opts := Options{Fleet: bf.fleet, Policy: policy, Cache: LMCacheView{Index: bf.index}, MaxEndpoints: 3, Now: func() time.Time { return benchNow }}
			into, pick := newPicker(t, opts), newPicker(t, opts)
			var a, b Decision
			reqs := []Request{{Tokens: bf.tokens}, {Tokens: cold, Explain: true}, {Tokens: bf.tokens, Subset: bf.addrs[:5]}, {}, {Tokens: bf.tokens, Explain: true}, {Tokens: bf.tokens}}
			for i, req := range reqs {
				dst := &a
				if i%2 == 1 {
					dst = &b
				}
				other, otherWas := &b, snapshot(b)
				if dst == &b {
					other, otherWas = &a, snapshot(a)
				}
				if err := into.PickInto(context.Background(), req, dst); err != nil {
					t.Fatal(err)
				}
				dst.Booking.Release()
				want, err := pick.Pick(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				want.Booking.Release()
				wantWas := snapshot(want)
				if d := cmp.Diff(snapshot(want), snapshot(*dst)); d != "" {
					t.Fatalf("decision %d: PickInto differs from Pick (-Pick +PickInto):\n%s", i, d)
				}
				if d := cmp.Diff(otherWas, snapshot(*other)); d != "" {
					t.Fatalf("decision %d changed the other Decision:\n%s", i, d)
				}
				// Later decisions, into dst and through Pick, must not reach Pick's Decision.
				if err := into.PickInto(context.Background(), Request{Tokens: cold}, dst); err != nil {
					t.Fatal(err)
				}
				dst.Booking.Release()
				later, err := pick.Pick(context.Background(), Request{Tokens: cold})
				if err != nil {
					t.Fatal(err)
				}
				later.Booking.Release()
				if d := cmp.Diff(wantWas, snapshot(want)); d != "" {
					t.Fatalf("decision %d: a later decision changed Pick's Decision:\n%s", i, d)
				}
			}
		})
	}
}

// PickInto's errors leave *d as Pick's would: no ranking, no endpoints, no booking.
func TestPickIntoErrorClearsTheDecision(t *testing.T) {
	bf := newBenchFleet(t, 10, 2)
	p := newPicker(t, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}})
	var d Decision
	if err := p.PickInto(context.Background(), Request{Tokens: bf.tokens}, &d); err != nil {
		t.Fatal(err)
	}
	d.Booking.Release()
	err := p.PickInto(context.Background(), Request{Tokens: bf.tokens, Subset: []string{"10.9.9.9:1"}}, &d)
	if err == nil || d.Ranked != nil || d.Endpoints != nil || d.Sources != nil || d.Booking != nil {
		t.Fatalf("err %v, decision %+v: want an error and an empty decision", err, d)
	}
}

// In steady state a decision through PickInto allocates only its Booking, at every fleet
// size and share of holders (the held path, the cache-affinity and the QPS fallback).
func TestPickIntoAllocatesOnlyTheBooking(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under -race")
	}
	for _, c := range []struct{ n, holders int }{{2, 2}, {256, 2}, {256, 85}, {1000, 333}} {
		t.Run(fmt.Sprintf("endpoints=%d/holders=%d", c.n, c.holders), func(t *testing.T) {
			bf := newBenchFleet(t, c.n, c.holders)
			p := newPicker(t, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}, MaxEndpoints: 2})
			var d Decision
			req := Request{Tokens: bf.tokens}
			pick := func() {
				if err := p.PickInto(context.Background(), req, &d); err != nil {
					t.Fatal(err)
				}
				d.Booking.Release()
			}
			pick() // the first decision grows the memory
			if got := testing.AllocsPerRun(200, pick); got > 1 {
				t.Errorf("%v allocations per decision, want 1 (the Booking)", got)
			}
		})
	}
}
