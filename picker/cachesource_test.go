package picker

import (
	"context"
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
			[]CacheMatch{{512, 0, SourceLMCache}, {96, 0, SourceVLLMEvents}, {0, -1, ""}}, false},
		{"a failing view is left out", Longest{failingCache{}, ev},
			[]CacheMatch{{512, 1, SourceVLLMEvents}, {96, 0, SourceVLLMEvents}, {0, -1, ""}}, false},
		{"every view failing is an error", Longest{failingCache{}, failingCache{}}, nil, true},
		{"no views: nothing held", Longest{}, []CacheMatch{{0, -1, ""}, {0, -1, ""}, {0, -1, ""}}, false},
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
