package picker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/kvindex"
)

func TestLongest(t *testing.T) {
	eps := []string{"a", "b", "c"}
	lm := mapCache{"a": {Matched: 512, HolderRank: 0, Source: SourceLMCache}, "b": {Matched: 16, HolderRank: 1, Source: SourceLMCache}}
	ev := mapCache{"b": {Matched: 96, HolderRank: 0, Source: SourceVLLMEvents}, "a": {Matched: 512, HolderRank: 1, Source: SourceVLLMEvents}}
	tests := []struct {
		name string
		l    Longest
		want []CacheMatch
		err  bool
	}{
		{"the longer prefix per endpoint wins; the first view on a tie", Longest{lm, ev},
			[]CacheMatch{{512, 0, SourceLMCache, 0}, {96, 0, SourceVLLMEvents, 0}, {0, -1, "", 0}}, false},
		{"a failing view is left out", Longest{failingCache{}, ev},
			[]CacheMatch{{512, 1, SourceVLLMEvents, 0}, {96, 0, SourceVLLMEvents, 0}, {0, -1, "", 0}}, false},
		{"every view failing is an error", Longest{failingCache{}, failingCache{}}, nil, true},
		{"no views: nothing held", Longest{}, []CacheMatch{{0, -1, "", 0}, {0, -1, "", 0}, {0, -1, "", 0}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.l.Match(context.Background(), []uint32{1}, eps)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExplainNamesTheSource(t *testing.T) {
	ix, err := kvindex.NewIndex(kvindex.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	ix.Apply("10.0.0.2:8000", kvindex.Batch{Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{1, 2}, Tokens: tokens[:32], BlockSize: 16}}})
	lm := mapCache{"10.0.0.3:8000": {Matched: 16, HolderRank: 0, Source: SourceLMCache}}
	// Sources are filled for their readers only, the explanation and the debug log: a
	// request that asks for no explanation, with the debug log off, gets none, and its
	// explanation names none.
	named := []string{"10.0.0.2:8000 matched=32 source=vllm-events", "10.0.0.3:8000 matched=16 source=lmcache"}
	for _, c := range []struct{ explain, debug, want bool }{
		{true, false, true}, {false, true, true}, {false, false, false},
	} {
		opts := Options{Fleet: newFleet("10.0.0.2:8000", "10.0.0.3:8000"), Cache: Longest{lm, KVEventsView{Index: ix}}}
		if c.debug {
			opts.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		d, err := newPicker(t, opts).Pick(context.Background(), Request{Tokens: tokens, Explain: c.explain})
		if err != nil {
			t.Fatal(err)
		}
		d.Booking.Release()
		ex := d.Explain()
		if !strings.Contains(ex, "winner=10.0.0.2:8000") {
			t.Errorf("%+v: explanation %q lacks the winner", c, ex)
		}
		for _, want := range named {
			if strings.Contains(ex, want) != c.want {
				t.Errorf("%+v: explanation %q, naming %q: %v", c, ex, want, !c.want)
			}
		}
		if c.want != (len(d.Sources) == 2) {
			t.Errorf("%+v: sources %v", c, d.Sources)
		}
	}
}

func TestParseCacheSource(t *testing.T) {
	for _, s := range []string{"lmcache", "vllm-events", "both"} {
		if got, err := ParseCacheSource(s); err != nil || got != s {
			t.Errorf("ParseCacheSource(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseCacheSource("redis"); err == nil {
		t.Error("ParseCacheSource(redis) accepted")
	}
}

// TestAdapterAndSaltRouting: a request for an adapter (a model that is not a base model)
// or with a cache_salt is credited only with the blocks stored under the same adapter
// and salt, through the KV events view alone and beside a view that cannot key
// (Longest), and a base-model request never with an adapter's.
func TestAdapterAndSaltRouting(t *testing.T) {
	ix, err := kvindex.NewIndex(kvindex.IndexConfig{ExtraKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	// Engine .2 holds the prompt under the base model, .3 under adapter sql, .4 under
	// adapter sql with salt s; .5 holds 16 tokens of it under adapter chat.
	store := func(ep, adapter, salt string, n int) {
		ix.Apply(ep, kvindex.Batch{DPRank: -1, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{1, 2, 3, 4}[:n/16],
			Tokens: tokens[:n], BlockSize: 16, LoRAName: adapter, Salt: salt}}})
	}
	store("10.0.0.2:8000", "", "", 64)
	store("10.0.0.3:8000", "sql", "", 64)
	store("10.0.0.4:8000", "sql", "s", 64)
	store("10.0.0.5:8000", "chat", "", 16)
	eps := []string{"10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000", "10.0.0.5:8000"}
	tests := []struct {
		name  string
		base  []string
		req   Request
		want  string // the winner
		match int    // its credited tokens
	}{
		{"the base model matches the base blocks", []string{"qwen"}, Request{Model: "qwen"}, "10.0.0.2:8000", 64},
		{"an adapter matches its own blocks", []string{"qwen"}, Request{Model: "sql"}, "10.0.0.3:8000", 64},
		{"an adapter and a salt match theirs", []string{"qwen"}, Request{Model: "sql", CacheSalt: "s"}, "10.0.0.4:8000", 64},
		{"another adapter matches only its own", []string{"qwen"}, Request{Model: "chat"}, "10.0.0.5:8000", 16},
		{"an unknown adapter matches nothing", []string{"qwen"}, Request{Model: "math"}, "", 0},
		{"a salt alone matches no unsalted blocks", []string{"qwen"}, Request{Model: "qwen", CacheSalt: "s"}, "", 0},
		{"without base models every model is the base", nil, Request{Model: "sql"}, "10.0.0.2:8000", 64},
	}
	for _, tc := range tests {
		for _, view := range []CacheView{KVEventsView{Index: ix}, Longest{NoCache{}, KVEventsView{Index: ix}}} {
			t.Run(fmt.Sprintf("%s/%T", tc.name, view), func(t *testing.T) {
				p := newPicker(t, Options{Fleet: newFleet(eps...), Cache: view, BaseModels: tc.base, Policy: "kvaware"})
				r := tc.req
				r.Tokens = tokens
				d, err := p.Pick(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				d.Booking.Release()
				if tc.want == "" {
					for _, rk := range d.Ranked {
						if rk.Matched != 0 {
							t.Fatalf("%s credited %d tokens, want none anywhere", rk.Addr, rk.Matched)
						}
					}
					return
				}
				if d.Endpoints[0] != tc.want || d.Ranked[0].Matched != tc.match {
					t.Fatalf("winner %s with %d tokens, want %s with %d (ranked %+v)", d.Endpoints[0], d.Ranked[0].Matched, tc.want, tc.match, d.Ranked)
				}
			})
		}
	}
}

// TestPrefixKeyTellsAdaptersApart: latencyaware's affinity key differs between adapters
// and salts of one prompt, and is the plain prompt's for the zero key.
func TestPrefixKeyTellsAdaptersApart(t *testing.T) {
	toks := []uint32{5, 6, 7}
	keys := map[uint64]kvindex.Key{}
	for _, k := range []kvindex.Key{{}, {Adapter: "a"}, {Adapter: "b"}, {Salt: "a"}, {Adapter: "a", Salt: "b"}, {Adapter: "ab"}} {
		h := prefixKey(toks, k)
		if prev, dup := keys[h]; dup {
			t.Fatalf("keys %+v and %+v share the prefix key %x", prev, k, h)
		}
		keys[h] = k
	}
	if prefixKey(nil, kvindex.Key{Adapter: "a"}) != 0 {
		t.Fatal("no tokens must give the zero key")
	}
}
