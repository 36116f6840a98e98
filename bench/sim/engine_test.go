package sim

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/lmcache"
)

func keys(t testing.TB) KeyFunc {
	t.Helper()
	h, err := lmcache.NewHasher(lmcache.KeyConfig{HashSeed: "123"})
	if err != nil {
		t.Fatal(err)
	}
	return h.ChunkKeys
}

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg, keys(t))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// add queues each request on e, failing t on a refusal.
func add(t testing.TB, e *Engine, rs ...*Request) {
	t.Helper()
	for _, r := range rs {
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
	}
}

// prompt returns n tokens: a tag that makes it distinct, then filler.
func prompt(tag uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = 1000 + uint32(i%50)
	}
	out[0] = tag
	return out
}

// withPrefix returns prefix followed by n unique tokens.
func withPrefix(prefix []uint32, tag uint32, n int) []uint32 {
	out := append([]uint32(nil), prefix...)
	for i := range n {
		out = append(out, tag*1000+uint32(i))
	}
	return out
}

// drain runs the engine from now until it is idle and returns the end time
// and every outcome's KV events.
func drain(t testing.TB, e *Engine, now time.Duration) (time.Duration, []KVEvent) {
	t.Helper()
	var kv []KVEvent
	for steps := 0; ; steps++ {
		end, ok := e.Start(now)
		if !ok {
			return now, kv
		}
		if steps > 100000 {
			t.Fatal("engine never went idle")
		}
		out := e.Finish()
		if out.At != end {
			t.Fatalf("outcome at %v, step ended %v", out.At, end)
		}
		kv = append(kv, out.KV...)
		now = end
	}
}

func sec(d float64) time.Duration { return time.Duration(d * float64(time.Second)) }

// The step formula, evaluated independently of the engine for one sequence.
func TestStepTimeFollowsTheRoofline(t *testing.T) {
	cfg := DefaultConfig()
	compute := 125e12 * cfg.PrefillEfficiency
	bw := 600e9 * cfg.MemEfficiency
	kvb := 36864.0
	overhead := cfg.StepOverhead + cfg.SeqOverhead

	e := newEngine(t, cfg)
	r := &Request{ID: "a", Tokens: prompt(1, 1579), MaxTokens: 3}
	add(t, e, r)
	end, ok := e.Start(0)
	if !ok {
		t.Fatal("idle engine with a request did not start")
	}
	n := 1579.0
	pairs := n * (n + 1) / 2
	// The transformer body (3.09e9 minus the 151,936 x 2,048 tied embedding)
	// acts on every prompt token, the LM head on the sampled position only.
	body, head := 3.09e9-151936*2048, 151936*2048.0
	prefill := (n*2*body+2*head)/compute + math.Max(4*36*16*128*pairs/compute, n*kvb/bw) + n*kvb/cfg.PCIeBandwidth
	// The step admits the request: its admission costs once, with one sequence in the batch.
	if want := overhead + cfg.AdmitOverhead + cfg.AdmitSeqCost + sec(prefill); absDur(end-want) > time.Microsecond {
		t.Fatalf("prefill step ends %v, want %v", end, want)
	}
	out := e.Finish()
	// The API server streams the token after the step: one token's output cost.
	if len(out.Tokens) != 1 || r.TokenTimes[0] != end+cfg.OutputCost {
		t.Fatalf("prefill step gave %d tokens at %v, want the first token at %v", len(out.Tokens), r.TokenTimes, end+cfg.OutputCost)
	}
	// Decode: weights streamed once, the sequence's KV read once.
	end2, _ := e.Start(end)
	decode := 3.09e9*2/bw + math.Max(4*36*16*128*(n+1)/compute, (n+1)*kvb/bw)
	if want := end + overhead + sec(decode); absDur(end2-want) > time.Microsecond {
		t.Fatalf("decode step ends %v, want %v", end2, want)
	}
	e.Finish()
	if _, busy := e.Busy(); busy {
		t.Fatal("engine busy after Finish")
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestChunkedPrefillSplitsLongPromptsOverSteps(t *testing.T) {
	cfg := DefaultConfig()
	e := newEngine(t, cfg)
	long := &Request{ID: "long", Tokens: prompt(1, 5000), MaxTokens: 2}
	add(t, e, long)
	var starts []int
	now := time.Duration(0)
	for len(long.TokenTimes) == 0 {
		end, ok := e.Start(now)
		if !ok {
			t.Fatal("engine stopped before the first token")
		}
		starts = append(starts, e.batch[0].tokens)
		e.Finish()
		now = end
	}
	// Budget 2048 per step: 2048 + 2048 + 904.
	if want := []int{2048, 2048, 904}; !reflect.DeepEqual(starts, want) {
		t.Fatalf("prefill chunks %v, want %v", starts, want)
	}
	if long.TokenTimes[0] != now+cfg.OutputCost {
		t.Fatalf("first token at %v, want the end of the last chunk %v and its output cost %v", long.TokenTimes[0], now, cfg.OutputCost)
	}
}

func TestDecodeRunsAlongsidePrefillInOneStep(t *testing.T) {
	e := newEngine(t, DefaultConfig())
	a := &Request{ID: "a", Tokens: prompt(1, 100), MaxTokens: 5}
	add(t, e, a)
	end, _ := e.Start(0)
	e.Finish()
	b := &Request{ID: "b", Tokens: prompt(2, 3000), MaxTokens: 5}
	add(t, e, b)
	e.Start(end)
	got := []int{e.batch[0].tokens, e.batch[1].tokens}
	// a decodes one token; b takes the rest of the 2048 budget.
	if want := []int{1, 2047}; !reflect.DeepEqual(got, want) {
		t.Fatalf("step tokens %v, want %v", got, want)
	}
	e.Finish()
}

func TestSharedPrefixIsComputedOnceAndShared(t *testing.T) {
	e := newEngine(t, DefaultConfig())
	prefix := prompt(7, 1544)
	first := &Request{ID: "first", Tokens: withPrefix(prefix, 1, 35), MaxTokens: 64}
	add(t, e, first)
	end, _ := e.Start(0)
	e.Finish()
	second := &Request{ID: "second", Tokens: withPrefix(prefix, 2, 35), MaxTokens: 64}
	other := &Request{ID: "other", Tokens: withPrefix(prompt(8, 1544), 3, 35), MaxTokens: 64}
	add(t, e, second, other)
	e.Start(end)
	e.Finish()
	// 1544 shared tokens = 96 full blocks of 16 (the 97th mixes in the suffix).
	if second.CachedTokens != 1536 || other.CachedTokens != 0 {
		t.Fatalf("cached tokens: second %d, other %d; want 1536 and 0", second.CachedTokens, other.CachedTokens)
	}
	// Three running requests: the shared prefix's 96 blocks are held once.
	perReq := (1579 + 1 + 15) / 16
	if got, want := e.pool.used(), 3*perReq-96; got != want {
		t.Fatalf("blocks in use %d, want %d (prefix shared)", got, want)
	}
	m := e.Metrics()
	if m.PrefixQueries != 3*1579 || m.PrefixHits != 1536 || m.Running != 3 {
		t.Fatalf("metrics %+v: want 3 queries of 1579 tokens, 1536 hit tokens, 3 running", m)
	}
}

func TestUnreferencedCachedBlocksAreEvictedLeastRecentlyUsedFirst(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVPoolTokens = 16 * 40 // 40 blocks
	cfg.CPUTierBytes = 0       // no CPU tier: only the GPU cache
	e := newEngine(t, cfg)
	now := time.Duration(0)
	run := func(id string, tokens []uint32) *Request {
		r := &Request{ID: id, Tokens: tokens, MaxTokens: 1}
		add(t, e, r)
		now, _ = drain(t, e, now)
		return r
	}
	x, y, z := prompt(1, 160), prompt(2, 160), prompt(3, 160) // 10 blocks each
	run("x", withPrefix(x, 1, 1))
	run("y", withPrefix(y, 2, 1))
	run("x again", withPrefix(x, 3, 1)) // touches x: y is now least recently used
	run("z", withPrefix(z, 4, 1))
	run("big", prompt(9, 16*17+1)) // needs 18 blocks: evicts the 18 least recently freed
	tests := []struct {
		name   string
		tokens []uint32
		want   int
	}{
		{"most recent prefix survives", withPrefix(z, 5, 1), 160},
		{"recently touched prefix survives", withPrefix(x, 6, 1), 160},
		{"least recently used prefix was evicted", withPrefix(y, 7, 1), 0},
	}
	for _, tt := range tests {
		r := run(tt.name, tt.tokens)
		if r.CachedTokens != tt.want {
			t.Errorf("%s: cached %d tokens, want %d", tt.name, r.CachedTokens, tt.want)
		}
	}
}

func TestRequestWaitsWhileItsBlocksDoNotFit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVPoolTokens = 16 * 20
	cfg.CPUTierBytes = 0
	e := newEngine(t, cfg)
	a := &Request{ID: "a", Tokens: prompt(1, 200), MaxTokens: 4} // 13 blocks
	b := &Request{ID: "b", Tokens: prompt(2, 200), MaxTokens: 4} // 13 more do not fit
	add(t, e, a, b)
	end, _ := e.Start(0)
	e.Finish()
	if m := e.Metrics(); m.Running != 1 || m.Waiting != 1 {
		t.Fatalf("after the first step: running %d waiting %d, want 1 and 1", m.Running, m.Waiting)
	}
	// vLLM counts a prefix-cache query at every attempt to admit a waiting
	// request: b's failed attempt in the first step and its second one now.
	end, _ = e.Start(end)
	e.Finish()
	if m := e.Metrics(); m.PrefixQueries != 3*200 || m.Waiting != 1 {
		t.Fatalf("%d queried tokens with %d waiting, want 600 (a once, b at each of two attempts) and b still waiting", m.PrefixQueries, m.Waiting)
	}
	drain(t, e, end)
	if !a.Done || !b.Done || b.TokenTimes[0] <= a.TokenTimes[len(a.TokenTimes)-1] {
		t.Fatalf("b's first token %v should follow a's last %v", b.TokenTimes, a.TokenTimes)
	}
}

func TestPreemptionRecomputesTheNewestRequest(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVPoolTokens = 16 * 12
	cfg.CPUTierBytes = 0
	e := newEngine(t, cfg)
	// Each prompt fills 5 blocks exactly; 40 output tokens need 3 more each:
	// 16 blocks for both, 12 exist.
	a := &Request{ID: "a", Tokens: prompt(1, 80), MaxTokens: 40}
	b := &Request{ID: "b", Tokens: prompt(2, 80), MaxTokens: 40}
	add(t, e, a, b)
	drain(t, e, 0)
	if a.Preemptions != 0 || b.Preemptions == 0 {
		t.Fatalf("preemptions a=%d b=%d: want only the newer request preempted", a.Preemptions, b.Preemptions)
	}
	if !a.Done || !b.Done || len(b.TokenTimes) != 40 {
		t.Fatalf("done a=%v b=%v with %d tokens: want both done, 40 tokens", a.Done, b.Done, len(b.TokenTimes))
	}
	if m := e.Metrics(); m.Preemptions != int64(b.Preemptions) {
		t.Fatalf("metric %d preemptions, request %d", m.Preemptions, b.Preemptions)
	}
	for i := 1; i < len(b.TokenTimes); i++ {
		if b.TokenTimes[i] <= b.TokenTimes[i-1] {
			t.Fatalf("token times not increasing at %d: %v", i, b.TokenTimes)
		}
	}
}

func TestCPUTierEmitsRealChunkKeysAndLoadsAfterGPUEviction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVPoolTokens = 16 * 120 // room for one 1,579-token request at a time
	cfg.CPUTierBytes = int64(cfg.KVBytesPerToken()) * 3500
	e := newEngine(t, cfg)
	kf := keys(t)
	p1 := withPrefix(prompt(1, 1544), 1, 35)
	p2 := withPrefix(prompt(2, 1544), 2, 35)
	p3 := withPrefix(prompt(3, 1544), 3, 35)
	now := time.Duration(0)
	run := func(tokens []uint32) (*Request, []KVEvent) {
		r := &Request{ID: "r", Tokens: tokens, MaxTokens: 1}
		add(t, e, r)
		var kv []KVEvent
		now, kv = drain(t, e, now)
		return r, kv
	}
	admits := func(tokens []uint32) []KVEvent {
		var out []KVEvent
		for _, k := range kf(tokens) {
			out = append(out, KVEvent{Key: k, Admit: true})
		}
		return out
	}

	_, kv := run(p1)
	if want := admits(p1); !reflect.DeepEqual(kv, want) {
		t.Fatalf("first request's events %v, want an admit per chunk (6 full + 1 partial) %v", kv, want)
	}
	if _, kv = run(p2); !reflect.DeepEqual(kv, admits(p2)) {
		t.Fatalf("second request's events %v, want only admits", kv)
	}
	// 3 x 1,579 tokens exceed 3,500: p1's oldest chunks go, 256 tokens each,
	// until p3's chunks fit.
	_, kv = run(p3)
	var evicted []int64
	n := 0
	for _, ev := range kv {
		if ev.Admit {
			n++
		} else {
			evicted = append(evicted, ev.Key)
		}
	}
	if n != 7 || !reflect.DeepEqual(evicted, kf(p1)[:5]) {
		t.Fatalf("third request: %d admits, evicted %v; want 7 admits and p1's first 5 chunks %v", n, evicted, kf(p1)[:5])
	}
	if got := e.Metrics().CPUTokens; got != 3*1579-5*256 {
		t.Fatalf("CPU tier holds %d tokens, want %d", got, 3*1579-5*256)
	}
	// p3 took most of p2's GPU blocks; p2's chunks are still in the CPU tier,
	// so a repeat of p2 loads what the GPU lost instead of recomputing it.
	r, _ := run(withPrefix(prompt(2, 1544), 2, 35))
	if r.LoadedTokens == 0 || r.CachedTokens+r.LoadedTokens != 1578 {
		t.Fatalf("repeat of p2: %d cached + %d loaded, want 1,578 together with some loaded", r.CachedTokens, r.LoadedTokens)
	}
}

func TestEngineIsDeterministic(t *testing.T) {
	run := func() [][]time.Duration {
		e := newEngine(t, DefaultConfig())
		var reqs []*Request
		for i := range 30 {
			r := &Request{ID: "r", Tokens: withPrefix(prompt(uint32(i%4), 1544), uint32(i), 35), MaxTokens: 16}
			add(t, e, r)
			reqs = append(reqs, r)
		}
		drain(t, e, 0)
		var out [][]time.Duration
		for _, r := range reqs {
			out = append(out, r.TokenTimes)
		}
		return out
	}
	if a, b := run(), run(); !reflect.DeepEqual(a, b) {
		t.Fatal("two identical runs differ")
	}
}

func TestAddRejectsUnservableRequests(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVPoolTokens = 160
	e := newEngine(t, cfg)
	tests := []struct {
		name string
		r    *Request
		is   error
	}{
		{"no prompt", &Request{ID: "a", MaxTokens: 1}, nil},
		{"no output", &Request{ID: "b", Tokens: prompt(1, 10)}, nil},
		{"larger than the pool", &Request{ID: "c", Tokens: prompt(1, 150), MaxTokens: 20}, ErrTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.Add(tt.r)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Fatalf("err = %v, want an error (%v)", err, tt.is)
			}
		})
	}
	if _, ok := e.Start(0); ok {
		t.Fatal("engine started with only refused requests")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"zero params", func(c *Config) { c.Params = 0 }},
		{"embedding as large as the model", func(c *Config) { c.EmbeddingParams = c.Params }},
		{"negative embedding", func(c *Config) { c.EmbeddingParams = -1 }},
		{"NaN bandwidth", func(c *Config) { c.MemBandwidth = math.NaN() }},
		{"efficiency above one", func(c *Config) { c.PrefillEfficiency = 1.5 }},
		{"pool smaller than a block", func(c *Config) { c.KVPoolTokens = 8 }},
		{"negative CPU tier", func(c *Config) { c.CPUTierBytes = -1 }},
		{"negative overhead", func(c *Config) { c.StepOverhead = -time.Millisecond }},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			if err := c.Validate(); err == nil {
				t.Fatal("want an error")
			}
			if _, err := New(c, keys(t)); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
	if _, err := New(DefaultConfig(), nil); err == nil {
		t.Fatal("New accepted a nil key function")
	}
}

func TestPhysicalConstants(t *testing.T) {
	c := DefaultConfig()
	if got := c.KVBytesPerToken(); got != 36864 {
		t.Errorf("KV bytes per token %d, want 36,864 (Qwen2.5-3B, bf16)", got)
	}
	if got := c.CPUTierTokens(); got != 116508 {
		t.Errorf("CPU tier %d tokens, want 116,508 (4 GiB)", got)
	}
	if got := c.Blocks(); got != 6187 {
		t.Errorf("%d blocks, want 6,187", got)
	}
}

func BenchmarkEngineSeed(b *testing.B) {
	kf := keys(b)
	for b.Loop() {
		e, err := New(DefaultConfig(), kf)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 250 {
			r := &Request{ID: "r", Tokens: withPrefix(prompt(uint32(i%16), 1544), uint32(i), 35), MaxTokens: 64}
			add(b, e, r)
		}
		drain(b, e, 0)
	}
}

// vLLM logs its gauges once per step: a request that arrives while a step runs
// is neither waiting nor running until the next step schedules it.
func TestGaugesAreThoseOfTheLastStep(t *testing.T) {
	e := newEngine(t, DefaultConfig())
	a := &Request{ID: "a", Tokens: prompt(1, 200), MaxTokens: 4}
	add(t, e, a)
	end, _ := e.Start(0)
	b := &Request{ID: "b", Tokens: prompt(2, 200), MaxTokens: 4}
	add(t, e, b)
	if m := e.Metrics(); m.Running != 0 || m.Waiting != 0 {
		t.Fatalf("during the first step: running %d waiting %d, want the gauges before it (0, 0)", m.Running, m.Waiting)
	}
	e.Finish()
	if m := e.Metrics(); m.Running != 1 || m.Waiting != 0 {
		t.Fatalf("after the first step: running %d waiting %d, want 1 and 0 (b arrived during the step)", m.Running, m.Waiting)
	}
	e.Start(end)
	e.Finish()
	if m := e.Metrics(); m.Running != 2 || m.Waiting != 0 {
		t.Fatalf("after the second step: running %d waiting %d, want 2 and 0", m.Running, m.Waiting)
	}
}

// LMCache saves a prompt whose prefix it did not find, and saves nothing of a
// prompt whose LMCache hit leaves less than a chunk boundary to the end: the
// CPU tier of a fleet that serves shared prefixes stays flat.
func TestLMCacheSavesOnlyPromptsItDidNotFind(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KVPoolTokens = 16 * 150 // small GPU pool: the second prompt must come from the CPU tier
	e := newEngine(t, cfg)
	shared := prompt(1, 1544)
	now := time.Duration(0)
	first := &Request{ID: "first", Tokens: withPrefix(shared, 1, 34), MaxTokens: 2}
	add(t, e, first)
	now, evs := drain(t, e, now)
	admits := 0
	for _, ev := range evs {
		if ev.Admit {
			admits++
		}
	}
	if admits != 7 { // 6 full chunks and the partial one
		t.Fatalf("first prompt stored %d chunks, want 7 (6 full + the trailing partial)", admits)
	}
	filler := &Request{ID: "filler", Tokens: prompt(9, 1800), MaxTokens: 2} // pushes the shared prefix out of the GPU pool
	add(t, e, filler)
	now, _ = drain(t, e, now)
	used := e.Metrics().CPUTokens
	second := &Request{ID: "second", Tokens: withPrefix(shared, 2, 34), MaxTokens: 2}
	add(t, e, second)
	_, evs = drain(t, e, now)
	if second.LoadedTokens == 0 {
		t.Fatalf("second prompt loaded nothing from the CPU tier (cached %d): the test needs a CPU hit", second.CachedTokens)
	}
	if len(evs) != 0 || e.Metrics().CPUTokens != used {
		t.Fatalf("second prompt (LMCache hit %d tokens) produced %d events, CPU tier %d -> %d tokens: want no save", second.LoadedTokens, len(evs), used, e.Metrics().CPUTokens)
	}
}

// The API server streams each step's tokens one after another, pipelined with
// the engine's next steps: n tokens of one step reach the client n output
// costs after it, and a step that ends while the API server is still busy
// waits for it.
func TestOutputsQueueAtTheAPIServer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OutputCost = 30 * time.Millisecond // longer than a step: the API server falls behind
	e := newEngine(t, cfg)
	var rs []*Request
	for i := range 3 {
		r := &Request{ID: fmt.Sprint(i), Tokens: prompt(uint32(i+1), 64), MaxTokens: 3}
		add(t, e, r)
		rs = append(rs, r)
	}
	var ends []time.Duration
	now := time.Duration(0)
	for range 3 {
		end, ok := e.Start(now)
		if !ok {
			t.Fatal("engine idle with work")
		}
		e.Finish()
		ends = append(ends, end)
		now = end
	}
	api := ends[0] + 3*cfg.OutputCost // three tokens of step 1
	for step := 1; step < 3; step++ {
		api = max(api, ends[step]) + 3*cfg.OutputCost
	}
	if got := rs[0].TokenTimes; len(got) != 3 || got[0] != ends[0]+3*cfg.OutputCost || got[2] != api {
		t.Fatalf("token times %v: want %v first and %v last (steps end %v)", got, ends[0]+3*cfg.OutputCost, api, ends)
	}
	if itl := rs[0].TokenTimes[1] - rs[0].TokenTimes[0]; itl != 3*cfg.OutputCost {
		t.Fatalf("gap %v: want the API server's %v per step of three tokens", itl, 3*cfg.OutputCost)
	}
}

// HostDelay is host time added to every step as it is, not scaled by Slowdown.
func TestHostDelayAddsToEveryStep(t *testing.T) {
	step := func(slowdown float64, delay time.Duration) time.Duration {
		cfg := DefaultConfig()
		cfg.Slowdown, cfg.HostDelay = slowdown, delay
		e := newEngine(t, cfg)
		add(t, e, &Request{ID: "a", Tokens: prompt(1, 100), MaxTokens: 2})
		end, _ := e.Start(0)
		return end
	}
	base := step(1, 0)
	if got := step(1, 20*time.Millisecond); got != base+20*time.Millisecond {
		t.Fatalf("step with 20 ms host delay %v, want %v", got, base+20*time.Millisecond)
	}
	if got := step(2, 20*time.Millisecond); absDur(got-(2*base+20*time.Millisecond)) > time.Microsecond {
		t.Fatalf("2x slower step with 20 ms host delay %v, want %v", got, 2*base+20*time.Millisecond)
	}
}
