package picker

import (
	"context"
	"testing"
	"time"
)

// Dynamo's own test of its per-worker account (lib/llm/src/kv_router/sequence.rs,
// test_multiworker_sequences): workers holding blocks [0 1 2], [3 4] and [0 1 2 3] with
// 12, 8 and 16 prefill tokens, asked for [0 1], have 3, 4 and 4 potential blocks; freed,
// they hold nothing.
func TestLedgerReproducesDynamosSequenceTest(t *testing.T) {
	l := newLedger()
	e0 := l.add("w0", []uint64{0, 1, 2}, 12)
	e1 := l.add("w1", []uint64{3, 4}, 8)
	e2 := l.add("w2", []uint64{0, 1, 2, 3}, 16)
	for _, tc := range []struct {
		addr                     string
		prefill, potential, want int
	}{{"w0", 12, 3, 3}, {"w1", 8, 4, 4}, {"w2", 16, 4, 4}} {
		prefill, active, fresh := l.view(tc.addr, []uint64{0, 1})
		if prefill != tc.prefill || active+fresh != tc.potential {
			t.Errorf("%s: prefill %d, potential blocks %d; want %d and %d", tc.addr, prefill, active+fresh, tc.prefill, tc.potential)
		}
	}
	for _, e := range []*ledgerEntry{e0, e1, e2} {
		e.Released()
		e.Released() // a second end changes nothing
	}
	for _, a := range []string{"w0", "w1", "w2"} {
		if prefill, active, fresh := l.view(a, []uint64{0, 1}); prefill != 0 || active != 0 || fresh != 2 {
			t.Errorf("%s after free: prefill %d, active %d, fresh %d; want 0, 0, 2", a, prefill, active, fresh)
		}
	}
}

// A shared block is counted once and stays while any request holding it is in flight; the
// prefill tokens leave at the first token, the blocks at the end.
func TestLedgerCountsSharedBlocksOnce(t *testing.T) {
	l := newLedger()
	a := l.add("e", []uint64{7, 8}, 100)
	b := l.add("e", []uint64{7, 9}, 40)
	if prefill, active, _ := l.view("e", nil); prefill != 140 || active != 3 {
		t.Fatalf("two requests sharing block 7: prefill %d, active %d; want 140 and 3", prefill, active)
	}
	a.Decoding()
	a.Decoding()
	if prefill, active, _ := l.view("e", nil); prefill != 40 || active != 3 {
		t.Fatalf("after a's first token: prefill %d, active %d; want 40 and 3", prefill, active)
	}
	a.Released()
	if prefill, active, fresh := l.view("e", []uint64{7, 8}); prefill != 40 || active != 2 || fresh != 1 {
		t.Fatalf("after a ends: prefill %d, active %d, fresh %d; want 40, 2 (7 and 9) and 1 (8)", prefill, active, fresh)
	}
	b.Released()
	b.Decoding() // after the end: nothing
	if prefill, active, _ := l.view("e", nil); prefill != 0 || active != 0 {
		t.Fatalf("after both end: prefill %d, active %d; want 0 and 0", prefill, active)
	}
}

// The picker keeps the account for the policies that read it: a dynamo-kv booking adds
// the prompt's blocks and its uncached tokens, its first token drops the tokens, its
// release the blocks; loadaware keeps none.
func TestPickerKeepsTheLedgerForItsReaders(t *testing.T) {
	const a1, a2 = "10.0.0.1:8000", "10.0.0.2:8000"
	tokens := make([]uint32, 40) // two full blocks and 8 tokens
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		policy string
		keeps  bool
	}{{"dynamo-kv", true}, {"llmd-sticky", true}, {"loadaware", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			p := newPicker(t, Options{Fleet: newFleet(a1, a2), Policy: tc.policy, Now: func() time.Time { return now }, Cache: mapCache{}})
			d, err := p.Pick(context.Background(), Request{Tokens: tokens})
			if err != nil {
				t.Fatal(err)
			}
			at := d.Endpoints[0]
			prefill, active, _ := p.ledger.view(at, nil)
			if !tc.keeps {
				if prefill != 0 || active != 0 {
					t.Fatalf("%s kept prefill %d, blocks %d", tc.policy, prefill, active)
				}
				d.Booking.Release()
				return
			}
			if prefill != 40 || active != 2 {
				t.Fatalf("after booking on %s: prefill %d, blocks %d; want 40 (nothing cached) and 2", at, prefill, active)
			}
			d.Booking.Decoding()
			if prefill, active, _ = p.ledger.view(at, nil); prefill != 0 || active != 2 {
				t.Fatalf("after the first token: prefill %d, blocks %d; want 0 and 2", prefill, active)
			}
			d.Booking.Release()
			if prefill, active, _ = p.ledger.view(at, nil); prefill != 0 || active != 0 {
				t.Fatalf("after the release: prefill %d, blocks %d; want 0 and 0", prefill, active)
			}
		})
	}
}
