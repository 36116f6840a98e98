package sim

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func loraConfig(slots int) Config {
	c := DefaultConfig()
	c.MaxLoRAs, c.AdapterLoad = slots, 5*time.Millisecond
	return c
}

// TestAdapterSlotsLimitWhatRuns: with one slot, a request for a second adapter waits
// until the first adapter's requests have all finished, while a request for the running
// adapter, queued behind it, is admitted at once (vLLM V1 passes it over, keeping its
// place); with two slots both run together.
func TestAdapterSlotsLimitWhatRuns(t *testing.T) {
	for _, tc := range []struct {
		slots    int
		waitsFor bool // b waits for a to finish
	}{{1, true}, {2, false}} {
		c := loraConfig(tc.slots)
		c.OutputCost = 0 // a token's time is its step's end
		e := newEngine(t, c)
		a := &Request{ID: "a", Tokens: prompt(1, 64), MaxTokens: 8, Adapter: "sql"}
		b := &Request{ID: "b", Tokens: prompt(2, 64), MaxTokens: 8, Adapter: "chat"}
		a2 := &Request{ID: "a2", Tokens: prompt(3, 64), MaxTokens: 8, Adapter: "sql"}
		for _, r := range []*Request{a, b, a2} {
			if err := e.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, e, 0)
		if !tc.waitsFor && b.AdmittedAt != a.AdmittedAt {
			t.Errorf("slots %d: b admitted at %v, a at %v: want together", tc.slots, b.AdmittedAt, a.AdmittedAt)
		}
		if a2.AdmittedAt != a.AdmittedAt {
			t.Errorf("slots %d: a2 (same adapter as a) admitted at %v, a at %v: want together", tc.slots, a2.AdmittedAt, a.AdmittedAt)
		}
		aEnd := a.TokenTimes[len(a.TokenTimes)-1]
		if waited := b.AdmittedAt >= aEnd; waited != tc.waitsFor {
			t.Errorf("slots %d: b admitted at %v, a finished at %v: waited %v, want %v", tc.slots, b.AdmittedAt, aEnd, waited, tc.waitsFor)
		}
	}
}

// TestAdaptersDoNotSharePrefixBlocks: the same prompt under another adapter (or the
// base model) finds nothing in the prefix cache; under the same adapter it finds its
// blocks.
func TestAdaptersDoNotSharePrefixBlocks(t *testing.T) {
	e := newEngine(t, loraConfig(2))
	p := prompt(7, 160)
	first := &Request{ID: "first", Tokens: p, MaxTokens: 1, Adapter: "sql"}
	if err := e.Add(first); err != nil {
		t.Fatal(err)
	}
	now, _ := drain(t, e, 0)
	for _, tc := range []struct {
		adapter string
		cached  bool
	}{{"chat", false}, {"", false}, {"sql", true}} {
		r := &Request{ID: "r-" + tc.adapter, Tokens: p, MaxTokens: 1, Adapter: tc.adapter}
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
		now, _ = drain(t, e, now)
		if (r.CachedTokens > 0) != tc.cached {
			t.Errorf("adapter %q: %d cached tokens, want cached %v", tc.adapter, r.CachedTokens, tc.cached)
		}
	}
}

// TestAdapterGaugesAndLoads: the gauges name the running and waiting adapters of the
// last step, sorted, and an activation into a slot is counted and lengthens its step by
// AdapterLoad.
func TestAdapterGaugesAndLoads(t *testing.T) {
	e := newEngine(t, loraConfig(1))
	for i, a := range []string{"sql", "chat", "sql"} {
		if err := e.Add(&Request{ID: a, Tokens: prompt(uint32(10+i), 32), MaxTokens: 4, Adapter: a}); err != nil {
			t.Fatal(err)
		}
	}
	end, ok := e.Start(0)
	if !ok {
		t.Fatal("no step")
	}
	e.Finish()
	m := e.Metrics()
	if m.MaxLoRAs != 1 || !slices.Equal(m.RunningAdapters, []string{"sql"}) || !slices.Equal(m.WaitingAdapters, []string{"chat"}) || m.AdapterLoads != 1 {
		t.Fatalf("after one step: %+v", m)
	}
	// The same first step without the load is AdapterLoad shorter.
	c := loraConfig(1)
	c.AdapterLoad = 0
	e2 := newEngine(t, c)
	for i, a := range []string{"sql", "chat", "sql"} {
		if err := e2.Add(&Request{ID: a, Tokens: prompt(uint32(10+i), 32), MaxTokens: 4, Adapter: a}); err != nil {
			t.Fatal(err)
		}
	}
	end2, _ := e2.Start(0)
	if d := end - end2; d != 5*time.Millisecond {
		t.Fatalf("the activating step is %v longer, want 5ms", d)
	}
	drain(t, e, end)
	if m := e.Metrics(); m.AdapterLoads != 2 || len(m.RunningAdapters)+len(m.WaitingAdapters) != 0 {
		t.Fatalf("after the run: %+v, want 2 loads and no adapters left", m)
	}
}

func TestAdapterRequestNeedsLoRA(t *testing.T) {
	e := newEngine(t, DefaultConfig())
	err := e.Add(&Request{ID: "x", Tokens: prompt(1, 8), MaxTokens: 1, Adapter: "sql"})
	if err == nil || !strings.Contains(err.Error(), "MaxLoRAs") || errors.Is(err, ErrTooLong) {
		t.Fatalf("err = %v, want one naming MaxLoRAs", err)
	}
}
