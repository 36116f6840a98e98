package gie

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
)

var fleet3 = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}

func newPicker(t *testing.T, endpoints []string, cfg Config) *Picker {
	t.Helper()
	p, err := New(endpoints, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// profileConfig is a GIE EndpointPickerConfig with one profile of the given scorers, each
// weight 1, and max-score-picker; prefixParams, if not empty, parameterizes the prefix scorer.
func profileConfig(prefixParams string, scorers ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n")
	for _, s := range scorers {
		fmt.Fprintf(&b, "- type: %s\n", s)
		if s == prefix.PrefixCacheScorerPluginType && prefixParams != "" {
			fmt.Fprintf(&b, "  parameters: %s\n", prefixParams)
		}
	}
	b.WriteString("- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n")
	for _, s := range scorers {
		fmt.Fprintf(&b, "  - pluginRef: %s\n    weight: 1\n", s)
	}
	b.WriteString("  - pluginRef: max-score-picker\n")
	return b.String()
}

func scoresOf(d Decision) map[string]float64 {
	out := map[string]float64{}
	for _, s := range d.Ranking {
		out[s.Endpoint] = s.Score
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestDefaultPipeline checks that New runs GIE's built-in default: the scorers and weights
// of pkg/epp/config/loader/defaults.go, the approximate prefix producer GIE's loader adds
// for the prefix scorer, the utilization saturation detector, and no response hooks.
func TestDefaultPipeline(t *testing.T) {
	p := newPicker(t, fleet3, Config{})
	pl := p.Pipeline()
	want := []ProfilePlugin{
		{Name: queuedepth.QueueScorerType, Type: queuedepth.QueueScorerType, Weight: 2},
		{Name: kvcacheutilization.KvCacheUtilizationScorerType, Type: kvcacheutilization.KvCacheUtilizationScorerType, Weight: 2},
		{Name: prefix.PrefixCacheScorerPluginType, Type: prefix.PrefixCacheScorerPluginType, Weight: 3},
		{Name: recordingPickerType, Type: recordingPickerType},
	}
	if fmt.Sprint(pl.Profile) != fmt.Sprint(want) {
		t.Errorf("profile = %v, want %v", pl.Profile, want)
	}
	if fmt.Sprint(pl.PrepareData) != fmt.Sprint([]string{approximateprefix.ApproxPrefixCachePluginType}) {
		t.Errorf("prepare-data plugins = %v, want the approximate prefix producer", pl.PrepareData)
	}
	if fmt.Sprint(pl.PreRequest) != fmt.Sprint([]string{approximateprefix.ApproxPrefixCachePluginType}) {
		t.Errorf("pre-request plugins = %v, want the approximate prefix producer", pl.PreRequest)
	}
	if len(pl.Admission)+len(pl.ResponseReceived)+len(pl.ResponseStreaming) != 0 {
		t.Errorf("default pipeline has admission/response plugins %v %v %v, want none", pl.Admission, pl.ResponseReceived, pl.ResponseStreaming)
	}
	if pl.SaturationDetector != utilization.UtilizationDetectorType {
		t.Errorf("saturation detector = %q, want %q", pl.SaturationDetector, utilization.UtilizationDetectorType)
	}
	if p.prefixWG == nil {
		t.Error("the prefix producer's pending-update group was not found")
	}
}

// TestUpstreamScorerCases re-states the inputs and expected scores of GIE v1.5.0's own
// scorer and scheduler tests and checks the adapter reproduces them: the queue scorer
// (queuedepth/queue_test.go), the KV-cache scorer (kvcacheutilization/
// kvcache_utilization_test.go), and the scheduler's "finds optimal endpoint" case
// (scheduling/scheduler_test.go, TestSchedule: kv, queue, prefix and LoRA scorers at
// weight 1; pod2, with the requested adapter active, wins with 2.8).
func TestUpstreamScorerCases(t *testing.T) {
	const lora = "lora-affinity-scorer"
	tests := []struct {
		name    string
		config  string
		model   string
		metrics []Metrics // per fleet3 endpoint
		want    []float64 // per fleet3 endpoint
		winner  int
	}{
		{
			name:    "queue: different sizes",
			config:  profileConfig("", queuedepth.QueueScorerType),
			metrics: []Metrics{{Waiting: 10}, {Waiting: 5}, {Waiting: 0}},
			want:    []float64{0, 0.5, 1},
			winner:  2,
		},
		{
			name:    "kv: different utilization",
			config:  profileConfig("", kvcacheutilization.KvCacheUtilizationScorerType),
			metrics: []Metrics{{KVCacheUsage: 0.8}, {KVCacheUsage: 0.5}, {KVCacheUsage: 0}},
			want:    []float64{0.2, 0.5, 1},
			winner:  2,
		},
		{
			name: "scheduler: finds optimal endpoint",
			config: profileConfig("", kvcacheutilization.KvCacheUtilizationScorerType, queuedepth.QueueScorerType,
				prefix.PrefixCacheScorerPluginType, lora),
			model: "critical",
			metrics: []Metrics{
				{KVCacheUsage: 0.2, MaxLoRA: 2, RunningAdapters: []string{"foo", "bar"}},
				{KVCacheUsage: 0.2, MaxLoRA: 2, RunningAdapters: []string{"foo", "critical"}},
				{Waiting: 10, KVCacheUsage: 0.8, MaxLoRA: 2, RunningAdapters: []string{"foo"}},
			},
			// pod1: kv 0.8 + queue 1 + lora 0 (full); pod2: 0.8 + 1 + lora 1; pod3: 0.2 + 0 + lora 0.8.
			want:   []float64{1.8, 2.8, 1.0},
			winner: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPicker(t, fleet3, Config{PickerConfig: tc.config})
			snap := map[string]Metrics{}
			for i, m := range tc.metrics {
				snap[fleet3[i]] = m
			}
			model := tc.model
			if model == "" {
				model = "m"
			}
			d, err := p.Pick(CompletionRequest("r1", model, "hi"), snap)
			if err != nil {
				t.Fatal(err)
			}
			got := scoresOf(d)
			for i, w := range tc.want {
				if !near(got[fleet3[i]], w) {
					t.Errorf("score(%s) = %v, want %v (all: %v)", fleet3[i], got[fleet3[i]], w, d.Ranking)
				}
			}
			if d.Endpoint != fleet3[tc.winner] || d.Ranking[0].Endpoint != d.Endpoint {
				t.Errorf("picked %s (ranking %v), want %s", d.Endpoint, d.Ranking, fleet3[tc.winner])
			}
		})
	}
}

// TestUpstreamPrefixCases re-states GIE's approximate prefix producer tests
// (approximateprefix/plugin_test.go): with 1-token (4-character) blocks, "aaaaaa" is one
// block; after it went to an endpoint, "aaaabbbb" (two blocks) matches one block there and
// none elsewhere (TestPrefixPluginCompletion); with autoTune the block size is the
// endpoints' vLLM block size, so 128 characters at 16 tokens x 4 characters are 2 blocks
// (TestPrefixPluginAutoTune), at 8 tokens 4 blocks.
func TestUpstreamPrefixCases(t *testing.T) {
	t.Run("completion", func(t *testing.T) {
		cfg := profileConfig(`{"blockSizeTokens": 1, "autoTune": false}`, prefix.PrefixCacheScorerPluginType)
		p := newPicker(t, fleet3, Config{PickerConfig: cfg})
		d1, err := p.Pick(CompletionRequest("r1", "test-model1", "aaaaaa"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range d1.Ranking {
			if s.PrefixTotalBlocks != 1 || s.PrefixMatchBlocks != 0 {
				t.Errorf("first request, %s: match %d of %d blocks, want 0 of 1", s.Endpoint, s.PrefixMatchBlocks, s.PrefixTotalBlocks)
			}
		}
		d3, err := p.Pick(CompletionRequest("r3", "test-model1", "aaaabbbb"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d3.Endpoint != d1.Endpoint {
			t.Errorf("prefix sharer went to %s, want the holder %s", d3.Endpoint, d1.Endpoint)
		}
		for _, s := range d3.Ranking {
			wantMatch := 0
			if s.Endpoint == d1.Endpoint {
				wantMatch = 1
			}
			if s.PrefixMatchBlocks != wantMatch || s.PrefixTotalBlocks != 2 {
				t.Errorf("%s: match %d of %d, want %d of 2", s.Endpoint, s.PrefixMatchBlocks, s.PrefixTotalBlocks, wantMatch)
			}
			if !near(s.Score, float64(wantMatch)/2) {
				t.Errorf("%s: score %v, want %v", s.Endpoint, s.Score, float64(wantMatch)/2)
			}
		}
	})
	for _, tc := range []struct {
		blockSize, wantBlocks int
	}{{16, 2}, {8, 4}, {0, 2}} {
		t.Run(fmt.Sprintf("autotune block %d", tc.blockSize), func(t *testing.T) {
			p := newPicker(t, fleet3, Config{})
			snap := map[string]Metrics{}
			for _, ep := range fleet3 {
				snap[ep] = Metrics{CacheBlockSize: tc.blockSize, CacheNumBlocks: 1000}
			}
			d, err := p.Pick(CompletionRequest("r", "test-model", strings.Repeat("a", 128)), snap)
			if err != nil {
				t.Fatal(err)
			}
			if d.Ranking[0].PrefixTotalBlocks != tc.wantBlocks {
				t.Errorf("prompt hashed into %d blocks, want %d", d.Ranking[0].PrefixTotalBlocks, tc.wantBlocks)
			}
		})
	}
}

// TestMetricsReachScorers checks the adapter's metrics feed under GIE's default profile
// (queue x2, KV x2, prefix x3): a queue-heavy endpoint loses, a full KV cache loses, a
// prefix holder wins when queues are equal, and a holder with the longest queue keeps the
// request only while 3 x match fraction outweighs the 2 points the queue costs it.
func TestMetricsReachScorers(t *testing.T) {
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 12) // 540 chars: 8 blocks of 64
	t.Run("queue-heavy loses", func(t *testing.T) {
		for seed := range uint64(8) {
			p := newPicker(t, fleet3, Config{Seed: seed})
			d, err := p.Pick(CompletionRequest("r", "m", "short"), map[string]Metrics{
				fleet3[0]: {Waiting: 0}, fleet3[1]: {Waiting: 9}, fleet3[2]: {Waiting: 0},
			})
			if err != nil {
				t.Fatal(err)
			}
			if d.Endpoint == fleet3[1] {
				t.Fatalf("seed %d: the queue-heavy endpoint won: %v", seed, d.Ranking)
			}
			if s := scoresOf(d); !near(s[fleet3[1]], 2) || !near(s[fleet3[0]], 4) {
				t.Errorf("scores %v, want 4 for empty queues (2 queue + 2 KV) and 2 for the longest", s)
			}
		}
	})
	t.Run("full KV cache loses", func(t *testing.T) {
		p := newPicker(t, fleet3, Config{})
		d, err := p.Pick(CompletionRequest("r", "m", "short"), map[string]Metrics{
			fleet3[0]: {KVCacheUsage: 0.9}, fleet3[1]: {KVCacheUsage: 0.1}, fleet3[2]: {KVCacheUsage: 0.5},
		})
		if err != nil {
			t.Fatal(err)
		}
		if d.Endpoint != fleet3[1] {
			t.Errorf("picked %s, want the emptiest KV cache %s: %v", d.Endpoint, fleet3[1], d.Ranking)
		}
	})
	holder := func(t *testing.T, p *Picker) string {
		t.Helper()
		d, err := p.Pick(CompletionRequest("seed-request", "m", prompt), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Done("seed-request"); err != nil {
			t.Fatal(err)
		}
		return d.Endpoint
	}
	t.Run("prefix holder wins at equal queues", func(t *testing.T) {
		p := newPicker(t, fleet3, Config{})
		h := holder(t, p)
		d, err := p.Pick(CompletionRequest("r2", "m", prompt+" and then some more words"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Endpoint != h || d.Ranking[0].PrefixMatchBlocks != 8 {
			t.Errorf("picked %s with %d matched blocks, want holder %s with 8: %v", d.Endpoint, d.Ranking[0].PrefixMatchBlocks, h, d.Ranking)
		}
	})
	for _, tc := range []struct {
		name      string
		suffix    string // extra prompt after the held 8 blocks
		holderWin bool
	}{
		// 8 of 8 blocks held: 3 x 1 = 3 > 2 queue points.
		{"whole prompt held", "", true},
		// 8 of 16 blocks held: 3 x 0.5 = 1.5 < 2.
		{"half the prompt held", strings.Repeat("x", 8*64), false},
	} {
		t.Run("holder with the longest queue: "+tc.name, func(t *testing.T) {
			p := newPicker(t, fleet3, Config{})
			h := holder(t, p)
			snap := map[string]Metrics{}
			for _, ep := range fleet3 {
				snap[ep] = Metrics{Waiting: 1}
			}
			snap[h] = Metrics{Waiting: 6}
			d, err := p.Pick(CompletionRequest("r2", "m", prompt+tc.suffix), snap)
			if err != nil {
				t.Fatal(err)
			}
			if (d.Endpoint == h) != tc.holderWin {
				t.Errorf("picked %s, holder %s, want holder winning = %v: %v", d.Endpoint, h, tc.holderWin, d.Ranking)
			}
		})
	}
}

// TestTieBreak checks the seeded tie-break: equal scores spread over the tied endpoints,
// the same seed repeats the same choices, and GIE's own time-seeded picker also returns a
// tied endpoint.
func TestTieBreak(t *testing.T) {
	fleet := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"}
	run := func(cfg Config) []string {
		p := newPicker(t, fleet, cfg)
		var picks []string
		for i := range 24 {
			d, err := p.Pick(CompletionRequest(fmt.Sprint(i), "m", "short"), nil)
			if err != nil {
				t.Fatal(err)
			}
			picks = append(picks, d.Endpoint)
		}
		return picks
	}
	a, b := run(Config{Seed: 3}), run(Config{Seed: 3})
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("same seed, different picks:\n%v\n%v", a, b)
	}
	seen := map[string]bool{}
	for _, e := range a {
		seen[e] = true
	}
	if len(seen) < 3 {
		t.Errorf("24 tied picks used %d of 4 endpoints: %v", len(seen), a)
	}
	if fmt.Sprint(run(Config{Seed: 4})) == fmt.Sprint(a) {
		t.Error("seeds 3 and 4 gave the same 24 tie-breaks")
	}
	for _, e := range run(Config{TimeSeededTies: true}) {
		if !strings.HasPrefix(e, "10.0.0.") {
			t.Errorf("GIE's picker chose %q", e)
		}
	}
}

// TestSubsetAndDone checks Envoy's subset hint narrows the candidates (GIE matches hosts)
// and that Done closes the request.
func TestSubsetAndDone(t *testing.T) {
	p := newPicker(t, fleet3, Config{})
	req := CompletionRequest("r", "m", "short")
	req.Subset = []string{fleet3[2]}
	d, err := p.Pick(req, map[string]Metrics{fleet3[2]: {Waiting: 50, KVCacheUsage: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Endpoint != fleet3[2] || len(d.Ranking) != 1 {
		t.Errorf("subset pick = %s, ranking %v; want only %s", d.Endpoint, d.Ranking, fleet3[2])
	}
	if p.InFlight() != 1 {
		t.Errorf("in flight = %d, want 1", p.InFlight())
	}
	if err := p.Done("r"); err != nil {
		t.Fatal(err)
	}
	if p.InFlight() != 0 {
		t.Errorf("in flight after Done = %d, want 0", p.InFlight())
	}
}

// TestChatCompletions checks a chat request is parsed by GIE's OpenAI parser from its path.
func TestChatCompletions(t *testing.T) {
	p := newPicker(t, fleet3, Config{})
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("hello there ", 20) + `"}]}`
	d, err := p.Pick(Request{ID: "c", Path: "/v1/chat/completions", Body: []byte(body)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Ranking[0].PrefixTotalBlocks == 0 {
		t.Errorf("chat prompt hashed into no blocks: %v", d.Ranking)
	}
	// The same body on the completions path has no prompt: GIE rejects it.
	if _, err := p.Pick(Request{ID: "c2", Body: []byte(body)}, nil); err == nil {
		t.Error("chat body on /v1/completions accepted")
	}
}

func TestErrors(t *testing.T) {
	newErrs := []struct {
		name      string
		endpoints []string
		cfg       Config
		want      string
	}{
		{"no endpoints", nil, Config{}, "no endpoints"},
		{"not host:port", []string{"10.0.0.1"}, Config{}, "not host:port"},
		{"duplicate", []string{"a:1", "a:1"}, Config{}, "twice"},
		{"bad yaml", fleet3, Config{PickerConfig: "plugins: ["}, "picker config"},
		{"two profiles", fleet3, Config{PickerConfig: "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n- name: b\n  plugins:\n  - pluginRef: queue-scorer\n"}, "2 scheduling profiles"},
		{"random picker", fleet3, Config{PickerConfig: "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: random-picker\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: random-picker\n"}, "random-picker"},
	}
	for _, tc := range newErrs {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.endpoints, tc.cfg)
			if err == nil {
				p.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}

	p := newPicker(t, fleet3, Config{})
	if _, err := p.Pick(CompletionRequest("x", "m", "hi"), nil); err != nil {
		t.Fatal(err)
	}
	pickErrs := []struct {
		name    string
		req     Request
		metrics map[string]Metrics
		want    string
	}{
		{"no id", CompletionRequest("", "m", "hi"), nil, "without an ID"},
		{"id in flight", CompletionRequest("x", "m", "hi"), nil, "already in flight"},
		{"unknown endpoint", CompletionRequest("y", "m", "hi"), map[string]Metrics{"9.9.9.9:1": {}}, "not a fleet endpoint"},
		{"kv out of range", CompletionRequest("y", "m", "hi"), map[string]Metrics{fleet3[0]: {KVCacheUsage: 42}}, "outside [0, 1]"},
		{"negative queue", CompletionRequest("y", "m", "hi"), map[string]Metrics{fleet3[0]: {Waiting: -1}}, "negative"},
		{"not json", Request{ID: "y", Body: []byte("{")}, nil, "unmarshal"},
		{"no model", Request{ID: "y", Body: []byte(`{"prompt":"hi"}`)}, nil, "model"},
	}
	for _, tc := range pickErrs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Pick(tc.req, tc.metrics)
			if err == nil {
				t.Fatal("Pick succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	// A rejected snapshot changes nothing: fleet3[0]'s queue of 9 was not installed.
	if _, err := p.Pick(CompletionRequest("z", "m", "hi"), map[string]Metrics{fleet3[0]: {Waiting: 9}, fleet3[1]: {KVCacheUsage: 2}}); err == nil {
		t.Fatal("a snapshot with KV usage 2 was accepted")
	}
	d, err := p.Pick(CompletionRequest("z", "m", "hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := scoresOf(d); !near(s[fleet3[0]], s[fleet3[1]]) {
		t.Errorf("after a rejected snapshot, scores %v: part of it was installed", s)
	}
	if err := p.Done("nope"); err == nil {
		t.Error("Done of an unknown request succeeded")
	}
}

// FuzzPick feeds arbitrary bodies and paths: Pick returns an error or a fleet endpoint.
// TestPickRoutesOrRefusesAnyBody sends bodies GIE's parser must route or refuse, never
// routing outside the fleet. (Not a fuzz target: fuzzing instruments GIE's whole
// dependency tree, a quarter of an hour of build for a parser that is GIE's, not ours.)
func TestPickRoutesOrRefusesAnyBody(t *testing.T) {
	p, err := New(fleet3, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cases := []struct{ path, body string }{
		{"/v1/completions", `{"model":"m","prompt":"hello"}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{"", `{"model":1}`},
		{"/v1/completions", `{"model":"m","prompt":`},
		{"/v1/completions", `[]`},
		{"/v1/chat/completions", `{"model":"m","messages":"x"}`},
	}
	for i, c := range cases {
		id := fmt.Sprint(i)
		d, err := p.Pick(Request{ID: id, Path: c.path, Body: []byte(c.body)}, nil)
		if err != nil {
			continue
		}
		if _, ok := p.pool.byAddr[d.Endpoint]; !ok {
			t.Fatalf("%s %s: picked %q, outside the fleet", c.path, c.body, d.Endpoint)
		}
		if err := p.Done(id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseStopsGoroutines checks Close ends the goroutines GIE's plugins start.
func TestCloseStopsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := New(fleet3, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pick(CompletionRequest("r", "m", strings.Repeat("a", 200)), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Done("r"); err != nil {
		t.Fatal(err)
	}
	p.Close()
}
