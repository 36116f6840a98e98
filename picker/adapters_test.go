package picker

import (
	"context"
	"testing"

	"github.com/loadaware/loadaware-epp/lora"
)

// TestAdapterResidencyTerm: a request for an adapter counts AdapterCost more in flight
// on the endpoints that would load it (a free slot) or wait for a slot (slots full), so
// the endpoint running it wins while the load difference is below that cost and loses
// past it; base-model requests and the zero cost are unaffected.
func TestAdapterResidencyTerm(t *testing.T) {
	const running, free, full = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"
	var tb lora.Table
	tb.Set(running, lora.Info{MaxLoRA: 2, Running: []string{"sql"}})
	tb.Set(free, lora.Info{MaxLoRA: 2, Running: []string{"chat"}})
	tb.Set(full, lora.Info{MaxLoRA: 2, Running: []string{"chat", "math"}})
	tests := []struct {
		name   string
		cost   AdapterCost
		model  string
		booked int // requests in flight on the endpoint running sql
		want   string
	}{
		{"the running endpoint wins under the cost", AdapterCost{FreeSlot: 3, SlotsFull: 8}, "sql", 2, running},
		{"past the free slot's cost the free endpoint wins", AdapterCost{FreeSlot: 3, SlotsFull: 8}, "sql", 4, free},
		{"a full endpoint loses to a free one", AdapterCost{FreeSlot: 1, SlotsFull: 8}, "sql", 2, free},
		{"no cost: load alone", AdapterCost{}, "sql", 1, free},
		{"base-model requests are unaffected", AdapterCost{FreeSlot: 3, SlotsFull: 8}, "qwen", 1, free},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(running, free, full)
			p := newPicker(t, Options{Fleet: f, Policy: "leastload", BaseModels: []string{"qwen"}, Adapters: &tb, AdapterCost: tc.cost})
			for range tc.booked {
				b, err := f.Book(running)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Release()
			}
			d, err := p.Pick(context.Background(), Request{Model: tc.model, Tokens: []uint32{1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			d.Booking.Release()
			if d.Endpoints[0] != tc.want {
				t.Fatalf("winner %s, want %s (ranked %+v)", d.Endpoints[0], tc.want, d.Ranked)
			}
		})
	}
}
