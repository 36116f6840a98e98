package picker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newFleet(addrs ...string) *fleet.Set {
	s := fleet.New()
	s.Update(addrs)
	return s
}

func newPicker(t testing.TB, o Options) *Picker {
	t.Helper()
	if o.Now == nil {
		now := time.Unix(0, 0)
		o.Now = func() time.Time { return now }
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mapCache holds fixed matches by address.
type mapCache map[string]CacheMatch

func (m mapCache) Match(_ context.Context, _ []uint32, eps []string) ([]CacheMatch, error) {
	out := make([]CacheMatch, len(eps))
	for i, a := range eps {
		if c, ok := m[a]; ok {
			out[i] = c
		} else {
			out[i] = CacheMatch{HolderRank: -1}
		}
	}
	return out, nil
}

type failingCache struct{}

func (failingCache) Match(context.Context, []uint32, []string) ([]CacheMatch, error) {
	return nil, errors.New("index unavailable")
}

type fakeTokenizer struct{ err error }

func (f fakeTokenizer) Tokenize(_ context.Context, r Request, _ []string) ([]uint32, error) {
	if f.err != nil {
		return nil, f.err
	}
	if r.ChatBody != nil {
		return make([]uint32, 10), nil
	}
	return make([]uint32, len(strings.Fields(r.Prompt))), nil
}

type recObserver struct {
	mu  sync.Mutex
	got []string
}

func (r *recObserver) Routed(ep string, toks []uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf("%s/%d", ep, len(toks)))
}

func TestPickFollowsThePolicyAndBooks(t *testing.T) {
	ids := make([]uint32, 1000)
	tests := []struct {
		name       string
		opts       Options
		req        Request
		want       string
		wantReason string
		wantTokens string
	}{
		{"loadaware sends a full hit to its holder", Options{Cache: mapCache{"10.0.0.2:8000": {Matched: 1000, HolderRank: 0}}},
			Request{Tokens: ids}, "10.0.0.2:8000", scoring.ReasonCacheAffinity, "request"},
		{"kvaware follows the chunk-0 holder", Options{Policy: "kvaware", Cache: mapCache{"10.0.0.3:8000": {Matched: 512, HolderRank: 0}}},
			Request{Tokens: ids}, "10.0.0.3:8000", scoring.ReasonCacheHolder, "request"},
		{"a text prompt without a tokenizer is routed on load alone", Options{Cache: mapCache{"10.0.0.2:8000": {Matched: 1000, HolderRank: 0}}},
			Request{Prompt: "hello there"}, "10.0.0.1:8000", scoring.ReasonLoadOnly, "none"},
		{"a chat without a tokenizer is routed on load alone", Options{},
			Request{ChatBody: []byte(`{}`)}, "10.0.0.1:8000", scoring.ReasonLoadOnly, "none"},
		{"a tokenized text prompt uses the cache", Options{Tokenizer: fakeTokenizer{}, Cache: mapCache{"10.0.0.3:8000": {Matched: 2, HolderRank: 0}}},
			Request{Prompt: "a b"}, "10.0.0.3:8000", scoring.ReasonCacheAffinity, "tokenizer"},
		{"a tokenizer error falls back to load", Options{Tokenizer: fakeTokenizer{err: errors.New("boom")}, Cache: mapCache{"10.0.0.3:8000": {Matched: 2, HolderRank: 0}}},
			Request{Prompt: "a b"}, "10.0.0.1:8000", scoring.ReasonLoadOnly, "none"},
		{"a failed cache lookup gives no credit", Options{Cache: failingCache{}},
			Request{Tokens: ids}, "10.0.0.1:8000", scoring.ReasonQPS, "request"},
		{"roundrobin starts at the first address", Options{Policy: "roundrobin"},
			Request{Tokens: ids}, "10.0.0.1:8000", scoring.ReasonRoundRobin, "request"},
		{"roundrobin needs no tokens for a text prompt", Options{Policy: "roundrobin"},
			Request{Prompt: "hello"}, "10.0.0.1:8000", scoring.ReasonRoundRobin, "not-needed"},
		{"kvaware without token ids takes its own fallback", Options{Policy: "kvaware", Cache: mapCache{"10.0.0.2:8000": {Matched: 1000, HolderRank: 0}}},
			Request{Prompt: "hello"}, "10.0.0.1:8000", scoring.ReasonQPS, "none"},
		{"sglang-cache-aware is given the cache", Options{Policy: "sglang-cache-aware", Cache: mapCache{"10.0.0.3:8000": {Matched: 1000, HolderRank: 0}}},
			Request{Tokens: ids}, "10.0.0.3:8000", scoring.ReasonBestMatch, "request"},
		{"aibrix-prefix-cache is given the cache", Options{Policy: "aibrix-prefix-cache", Cache: mapCache{"10.0.0.2:8000": {Matched: 10, HolderRank: 0}}},
			Request{Tokens: ids}, "10.0.0.2:8000", scoring.ReasonBestMatch, "request"},
		{"gie-default tokenizes a text prompt and uses the cache", Options{Policy: "gie-default", Tokenizer: fakeTokenizer{}, Cache: mapCache{"10.0.0.3:8000": {Matched: 2, HolderRank: 0}}},
			Request{Prompt: "a b"}, "10.0.0.3:8000", scoring.ReasonWeighted, "tokenizer"},
		{"llmd-precise is given the cache", Options{Policy: "llmd-precise", Cache: mapCache{"10.0.0.2:8000": {Matched: 16, HolderRank: 0}}},
			Request{Tokens: ids}, "10.0.0.2:8000", scoring.ReasonWeighted, "request"},
		{"dynamo-kv is given the cache", Options{Policy: "dynamo-kv", Cache: mapCache{"10.0.0.3:8000": {Matched: 1000, HolderRank: 0}}},
			Request{Tokens: ids}, "10.0.0.3:8000", scoring.ReasonLowestCost, "request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
			tt.opts.Fleet = f
			p := newPicker(t, tt.opts)
			d, err := p.Pick(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Endpoints[0] != tt.want || d.Ranked[0].Reason != tt.wantReason || d.Tokens != tt.wantTokens {
				t.Fatalf("got %v reason %s tokens %s (note %q), want %s reason %s tokens %s",
					d.Endpoints, d.Ranked[0].Reason, d.Tokens, d.Note, tt.want, tt.wantReason, tt.wantTokens)
			}
			if d.Booking == nil || d.Booking.Addr() != tt.want {
				t.Fatalf("booking %v, want one on %s", d.Booking, tt.want)
			}
			if l := f.Loads([]string{tt.want})[0]; l.Prefill != 1 {
				t.Fatalf("winner has %d in prefill, want 1", l.Prefill)
			}
			d.Booking.Release()
		})
	}
}

func TestConcurrentPicksDoNotHerd(t *testing.T) {
	for _, policy := range []string{"leastload", "loadaware"} {
		t.Run(policy, func(t *testing.T) {
			addrs := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"}
			f := newFleet(addrs...)
			// Every endpoint holds the whole prompt, so only load separates them.
			cache := mapCache{}
			for i, a := range addrs {
				cache[a] = CacheMatch{Matched: 100, HolderRank: i}
			}
			p := newPicker(t, Options{Fleet: f, Policy: policy, Cache: cache})
			const n = 400
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if _, err := p.Pick(context.Background(), Request{Tokens: make([]uint32, 100)}); err != nil {
						t.Error(err)
					}
				}()
			}
			close(start)
			wg.Wait()
			for _, l := range f.All() {
				if l.Prefill != n/len(addrs) {
					t.Fatalf("loads %+v: concurrent picks must spread exactly evenly (%d each)", f.All(), n/len(addrs))
				}
			}
		})
	}
}

func TestSubsetHint(t *testing.T) {
	tests := []struct {
		name    string
		subset  []string
		want    string
		wantErr error
	}{
		{"no hint: whole fleet", nil, "10.0.0.1:8000", nil},
		{"ip:port entries narrow the choice", []string{"10.0.0.2:8000"}, "10.0.0.2:8000", nil},
		{"an IP alone matches its ports", []string{"10.0.0.3"}, "10.0.0.3:8000", nil},
		{"unknown entries are ignored when others match", []string{"10.9.9.9:1", "10.0.0.3:8000"}, "10.0.0.3:8000", nil},
		{"present but empty", []string{}, "", ErrSubsetEmpty},
		{"nothing matches", []string{"10.9.9.9:8000"}, "", ErrSubsetUnmatched},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"), Policy: "leastload"})
			d, err := p.Pick(context.Background(), Request{Subset: tt.subset})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || d.Endpoints[0] != tt.want {
				t.Fatalf("got %v, %v; want %s", d.Endpoints, err, tt.want)
			}
		})
	}
}

func TestNoEndpoints(t *testing.T) {
	p := newPicker(t, Options{Fleet: fleet.New()})
	if _, err := p.Pick(context.Background(), Request{}); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("err = %v, want ErrNoEndpoints", err)
	}
}

func TestFallbackListAndMaxEndpoints(t *testing.T) {
	f := newFleet("10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1")
	b, _ := f.Book("10.0.0.1:1")
	defer b.Release()
	p := newPicker(t, Options{Fleet: f, Policy: "leastload", MaxEndpoints: 2})
	d, err := p.Pick(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Endpoints, ","); got != "10.0.0.2:1,10.0.0.3:1" {
		t.Fatalf("endpoints %s, want the two idle ones in order", got)
	}
	if len(d.Ranked) != 3 {
		t.Fatalf("ranked %d candidates, want all 3", len(d.Ranked))
	}
}

func TestSetConfigValidatesAndSwitches(t *testing.T) {
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:1")})
	if got := p.Config(); got != (Config{Policy: "loadaware", Beta: 1}) {
		t.Fatalf("default config %+v", got)
	}
	if err := p.SetConfig(Config{Policy: "nope", Beta: 1}); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if err := p.SetConfig(Config{Policy: "loadaware", Beta: -3}); err == nil {
		t.Fatal("negative beta accepted")
	}
	if got := p.Config(); got.Policy != "loadaware" || got.Beta != 1 {
		t.Fatalf("a refused change altered the config: %+v", got)
	}
	if err := p.SetConfig(Config{Policy: "roundrobin", Beta: 2}); err != nil {
		t.Fatal(err)
	}
	d, _ := p.Pick(context.Background(), Request{Tokens: []uint32{1}})
	if d.Policy != "roundrobin" || d.Beta != 2 {
		t.Fatalf("decision used %s/%v after the switch", d.Policy, d.Beta)
	}
}

func TestObserverAndMetricsAndExplain(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs := &recObserver{}
	p := newPicker(t, Options{
		Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Registerer: reg, Observer: obs,
		Cache: mapCache{"10.0.0.2:8000": {Matched: 256, HolderRank: 0}},
	})
	d, err := p.Pick(context.Background(), Request{Tokens: make([]uint32, 300)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pick(context.Background(), Request{ChatBody: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if len(obs.got) != 1 || obs.got[0] != "10.0.0.2:8000/300" {
		t.Fatalf("observer saw %v, want one routed prompt of 300 tokens to 10.0.0.2:8000", obs.got)
	}
	if v := testutil.ToFloat64(p.metrics.decisions.WithLabelValues("loadaware", scoring.ReasonCacheAffinity)); v != 1 {
		t.Fatalf("cache-affinity decisions = %v, want 1", v)
	}
	if v := testutil.ToFloat64(p.metrics.untokenized.WithLabelValues("chat-no-tokenizer")); v != 1 {
		t.Fatalf("untokenized chat = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(reg, "loadaware_decision_duration_seconds"); n != 1 {
		t.Fatalf("latency histogram missing")
	}
	ex := d.Explain()
	for _, want := range []string{"policy=loadaware", "beta=1", "winner=10.0.0.2:8000", "reason=cache-affinity",
		"prompt_tokens=300", "10.0.0.2:8000 matched=256 inflight=0", "10.0.0.1:8000 matched=0"} {
		if !strings.Contains(ex, want) {
			t.Errorf("explanation %q lacks %q", ex, want)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{2, 16, 256} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			addrs := make([]string, n)
			cache := mapCache{}
			for i := range addrs {
				addrs[i] = fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250+1)
				if i%3 == 0 {
					cache[addrs[i]] = CacheMatch{Matched: 1536, HolderRank: i / 3}
				}
			}
			p := newPicker(b, Options{Fleet: newFleet(addrs...), Cache: cache})
			req := Request{Tokens: make([]uint32, 1578)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := p.Pick(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				d.Booking.Release()
			}
		})
	}
}

// A prompt over MaxPromptBytes is never handed to the tokenizer: it is routed on load
// alone, and the explanation and the metric say why.
func TestMaxPromptBytes(t *testing.T) {
	tests := []struct {
		name, prompt string
		chat         []byte
		limit        int
		wantTokens   int
		wantReason   string // the untokenized reason counted, "" for none
	}{
		{"text under the limit", "a b c", nil, 16, 3, ""},
		{"text over the limit", strings.Repeat(" ", 17), nil, 16, 0, "text-too-large"},
		{"chat over the limit", "", []byte(`{"messages":[{"role":"user","content":"hello there"}]}`), 16, 0, "chat-too-large"},
		{"no bound", strings.Repeat("a ", 1000), nil, -1, 1000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000"), Tokenizer: fakeTokenizer{}, MaxPromptBytes: tt.limit})
			d, err := p.Pick(context.Background(), Request{Prompt: tt.prompt, ChatBody: tt.chat})
			if err != nil {
				t.Fatal(err)
			}
			if d.PromptTokens != tt.wantTokens {
				t.Fatalf("prompt tokens %d, want %d", d.PromptTokens, tt.wantTokens)
			}
			if tt.wantReason == "" {
				return
			}
			if v := testutil.ToFloat64(p.metrics.untokenized.WithLabelValues(tt.wantReason)); v != 1 {
				t.Fatalf("untokenized %s = %v, want 1", tt.wantReason, v)
			}
			if ex := d.Explain(); !strings.Contains(ex, "over --max-prompt-bytes 16: not tokenized, routed on load alone") {
				t.Fatalf("explanation %q does not say the prompt was too large", ex)
			}
		})
	}
}

// heldTokenizer tokenizes as fakeTokenizer once release is closed, and says when a call
// has started.
type heldTokenizer struct {
	started chan struct{}
	release chan struct{}
}

func (h heldTokenizer) Tokenize(ctx context.Context, r Request, eps []string) ([]uint32, error) {
	h.started <- struct{}{}
	<-h.release
	return fakeTokenizer{}.Tokenize(ctx, r, eps)
}

// At most LargeTokenizations prompts of LargePromptBytes or more are tokenized at once: one
// more is routed on load alone at once (noted, counted), a small prompt still is tokenized
// beside them, and a slot freed is taken again.
func TestLargeTokenizationsAreBounded(t *testing.T) {
	tok := heldTokenizer{started: make(chan struct{}, 8), release: make(chan struct{})}
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Tokenizer: tok, LargeTokenizations: 2})
	large := strings.Repeat("a ", LargePromptBytes/2)
	done := make(chan Decision, 2)
	for range 2 {
		go func() {
			d, err := p.Pick(context.Background(), Request{Prompt: large})
			if err != nil {
				t.Error(err)
			}
			done <- d
		}()
	}
	<-tok.started
	<-tok.started // both slots held
	d, err := p.Pick(context.Background(), Request{Prompt: large})
	if err != nil {
		t.Fatal(err)
	}
	d.Booking.Release()
	if d.PromptTokens != 0 || !strings.Contains(d.Explain(), "2 prompts over 32768 bytes are being tokenized already") {
		t.Errorf("a third large prompt: %d tokens, %q; want it routed on load alone, saying why", d.PromptTokens, d.Explain())
	}
	if v := testutil.ToFloat64(p.metrics.untokenized.WithLabelValues("text-tokenizer-busy")); v != 1 {
		t.Errorf("untokenized text-tokenizer-busy = %v, want 1", v)
	}
	small := make(chan Decision, 1)
	go func() {
		d, err := p.Pick(context.Background(), Request{Prompt: "a b c"})
		if err != nil {
			t.Error(err)
		}
		small <- d
	}()
	<-tok.started // a small prompt takes no slot: it reaches the tokenizer
	close(tok.release)
	if d := <-small; d.PromptTokens != 3 {
		t.Errorf("small prompt: %d tokens, want 3", d.PromptTokens)
	} else {
		d.Booking.Release()
	}
	for range 2 {
		d := <-done
		if d.PromptTokens != LargePromptBytes/2 {
			t.Errorf("a large prompt holding a slot: %d tokens, want %d", d.PromptTokens, LargePromptBytes/2)
		}
		d.Booking.Release()
	}
	d, err = p.Pick(context.Background(), Request{Prompt: large}) // the slots are free again
	if err != nil {
		t.Fatal(err)
	}
	<-tok.started
	d.Booking.Release()
	if d.PromptTokens != LargePromptBytes/2 {
		t.Errorf("after the slots were freed: %d tokens, want %d", d.PromptTokens, LargePromptBytes/2)
	}
}
