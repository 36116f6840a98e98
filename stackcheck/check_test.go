package stackcheck

import (
	"bytes"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/cachealarm"
)

const (
	epA = "10.0.0.1:8000"
	epB = "10.0.0.2:8000"
)

// correct is a deployment where every precondition holds, for a cache source.
func correct(source string) Facts {
	st := PickerState{Endpoints: []string{epA, epB}, CacheSource: source, Tokenizer: "Qwen2.5 BPE",
		Alarm: &AlarmState{WindowSeconds: 120, Endpoints: []cachealarm.State{{Endpoint: epA}, {Endpoint: epB}}}}
	f := Facts{HeartbeatMaxAge: 60, Gateway: &GatewayProbe{Winners: []string{epA, epA, epA}, Matched: []int{0, 512, 512}}}
	if source != "vllm-events" {
		st.LMCache = &LMCacheState{HashSeed: "123", ChunkSize: 256, KeyFormat: "v0.3", PullPort: 9000, ReplyPort: 9001,
			Instances: []Instance{{ID: "a", IP: "10.0.0.1", State: "active", Keys: 10, Heartbeats: true, LastSeen: 2},
				{ID: "b", IP: "10.0.0.2", State: "active", Keys: 10}}}
		f.Ports = []Port{{Name: "pull", Addr: "picker:9000"}, {Name: "reply", Addr: "picker:9001"}}
	}
	if source != "lmcache" {
		st.KVEvents = &KVEventsState{Port: 5557}
	}
	f.State = st
	for _, ep := range st.Endpoints {
		f.Engines = append(f.Engines, Engine{Endpoint: ep, Text: cachealarm.Sample{OK: true}, Chat: cachealarm.Sample{OK: true},
			StreamBefore: &Stream{Endpoint: ep, Seq: 4, Batches: 5}, StreamAfter: &Stream{Endpoint: ep, Seq: 6, Batches: 7},
			Credit: 512, PromptTotal: 600})
	}
	return f
}

// engine edits the engine at ep.
func engine(f *Facts, ep string, edit func(*Engine)) {
	for i := range f.Engines {
		if f.Engines[i].Endpoint == ep {
			edit(&f.Engines[i])
		}
	}
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		source string
		edit   func(*Facts)
		// fail is the one row expected to fail ("check target"), "" for none; fix a
		// fragment of its fix; blocked the rows that must then be blocked.
		fail, fix string
		blocked   []string
	}{
		{name: "a correct LMCache stack passes", source: "lmcache", edit: func(*Facts) {}},
		{name: "a correct vLLM KV events stack passes", source: "vllm-events", edit: func(*Facts) {}},
		{name: "a correct stack with both sources passes", source: "both", edit: func(*Facts) {}},
		{name: "an unreadable admin state fails alone and names the token", source: "lmcache",
			edit: func(f *Facts) { f.StateErr = "401 Unauthorized" }, fail: chkAdmin + " ", fix: "LOADAWARE_ADMIN_TOKEN"},
		{name: "a dead engine fails its health and blocks its other rows", source: "lmcache",
			edit: func(f *Facts) {
				engine(f, epB, func(e *Engine) {
					e.HealthErr, e.MetricsErr, e.TokenizeErr, e.CreditErr = "connection refused", "connection refused", "connection refused", "connection refused"
				})
			},
			fail: chkHealth + " " + epB, fix: "restart it",
			blocked: []string{chkEngMet + " " + epB, chkTokenizer + " " + epB, chkCredit + " " + epB}},
		{name: "an engine without /metrics fails that row", source: "lmcache",
			edit: func(f *Facts) { engine(f, epA, func(e *Engine) { e.MetricsErr = "404" }) },
			fail: chkEngMet + " " + epA, fix: "expose the engine's /metrics"},
		{name: "a tokenizer that differs fails parity and blocks the credit it spoils", source: "lmcache",
			edit: func(f *Facts) {
				engine(f, epB, func(e *Engine) { e.Text = cachealarm.Sample{Detail: "text: token 0 differs"}; e.Credit = 0 })
			},
			fail: chkTokenizer + " " + epB, fix: "--tokenizer PATH", blocked: []string{chkCredit + " " + epB}},
		{name: "a chat template that differs names the template", source: "lmcache",
			edit: func(f *Facts) {
				engine(f, epA, func(e *Engine) { e.Chat = cachealarm.Sample{Detail: "chat: token 7 differs"} })
			},
			fail: chkTokenizer + " " + epA, fix: "chat_template"},
		{name: "a picker without a tokenizer (token-id prompts) passes", source: "lmcache",
			edit: func(f *Facts) { f.State.Tokenizer = "" }},
		{name: "a wrong hash seed fails the credit row with the seed in its fix", source: "lmcache",
			edit: func(f *Facts) { engine(f, epB, func(e *Engine) { e.Credit = 0 }) },
			fail: chkCredit + " " + epB, fix: "--lmcache-hash-seed, now 123"},
		{name: "the silent-miss detector fails the credit row", source: "lmcache",
			edit: func(f *Facts) { f.Metrics.SilentMiss = []string{"10.0.0.1"} },
			fail: chkCredit + " " + epA, fix: "PYTHONHASHSEED"},
		{name: "an unexposed controller port fails that row alone", source: "lmcache",
			edit: func(f *Facts) { f.Ports[0].Err = "connection refused" }, fail: chkPorts + " ", fix: "expose the controller ports"},
		{name: "an unexposed controller port blocks the registrations it prevents", source: "lmcache",
			edit: func(f *Facts) {
				f.Ports[0].Err = "connection refused"
				f.State.LMCache.Instances = nil
				for i := range f.Engines {
					f.Engines[i].Credit = 0
				}
				f.Gateway.Matched = []int{0, 0, 0}
			},
			fail: chkPorts + " ", fix: "expose the controller ports",
			blocked: []string{chkRegister + " " + epA, chkHeartbeat + " " + epA, chkCredit + " " + epA,
				chkRegister + " " + epB, chkHeartbeat + " " + epB, chkCredit + " " + epB, chkProbe + " "}},
		{name: "an instance registered under another IP fails registration", source: "lmcache",
			edit: func(f *Facts) { f.State.LMCache.Instances[1].IP = "172.17.0.5" },
			fail: chkRegister + " " + epB, fix: "pod IP", blocked: []string{chkHeartbeat + " " + epB}},
		{name: "a stale heartbeat fails that row", source: "lmcache",
			edit: func(f *Facts) { f.State.LMCache.Instances[0].LastSeen = 600 },
			fail: chkHeartbeat + " " + epA, fix: "stopped heartbeating"},
		{name: "a stream silent because the check's prompt was refused says why", source: "vllm-events",
			edit: func(f *Facts) {
				engine(f, epB, func(e *Engine) {
					e.StreamBefore, e.StreamAfter, e.Credit = nil, nil, 0
					e.CreditErr = "POST /v1/completions answered 401: export VLLM_API_KEY"
				})
			},
			fail: chkStream + " " + epB, fix: "let the check send the engine a prompt", blocked: []string{chkCredit + " " + epB}},
		{name: "a silent KV event stream fails that row and blocks its credit", source: "vllm-events",
			edit: func(f *Facts) {
				engine(f, epB, func(e *Engine) { e.StreamBefore, e.StreamAfter, e.Credit = nil, nil, 0 })
			},
			fail: chkStream + " " + epB, fix: "--kv-events-config", blocked: []string{chkCredit + " " + epB}},
		{name: "a stream whose sequence stopped fails", source: "vllm-events",
			edit: func(f *Facts) { engine(f, epA, func(e *Engine) { e.StreamAfter = e.StreamBefore }) },
			fail: chkStream + " " + epA, fix: "stopped publishing"},
		{name: "an unreachable event port fails that row and blocks the stream", source: "vllm-events",
			edit: func(f *Facts) {
				engine(f, epA, func(e *Engine) { e.EventPortErr = "connection refused"; e.StreamAfter = nil; e.Credit = 0 })
			},
			fail: chkEvPort + " " + epA, fix: "expose the engine's KV events PUB port", blocked: []string{chkStream + " " + epA, chkCredit + " " + epA}},
		{name: "an unrecovered gap fails and asks for a replay socket", source: "vllm-events",
			edit: func(f *Facts) { f.Metrics.GapDrops = 2 }, fail: chkGaps + " ", fix: "--kv-events-replay-port"},
		{name: "a probe that lands on two engines fails", source: "lmcache",
			edit: func(f *Facts) { f.Gateway.Winners[2] = epB }, fail: chkProbe + " ", fix: "--beta"},
		{name: "a probe whose repeats are not credited fails", source: "lmcache",
			edit: func(f *Facts) { f.Gateway.Matched[2] = 0 }, fail: chkProbe + " ", fix: "in time"},
		{name: "no gateway skips the probe", source: "lmcache", edit: func(f *Facts) { f.Gateway = nil }},
		{name: "replicas not connected to NATS fail", source: "lmcache",
			edit: func(f *Facts) { f.State.Replicas = &ReplicasConfig{Subject: "loadaware"} }, fail: chkReplicas + " ", fix: "--nats-url"},
		{name: "replicas that miss a peer fail", source: "lmcache",
			edit: func(f *Facts) {
				f.State.Replicas, f.Replicas = &ReplicasConfig{}, 3
				f.Metrics.NATS, f.Metrics.NATSConnected, f.Metrics.Peers = true, true, 1
			},
			fail: chkReplicas + " ", fix: "--nats-subject"},
		{name: "connected replicas with every peer pass", source: "lmcache",
			edit: func(f *Facts) {
				f.State.Replicas, f.Replicas = &ReplicasConfig{}, 3
				f.Metrics.NATS, f.Metrics.NATSConnected, f.Metrics.Peers = true, true, 2
			}},
		{name: "an endpoint in alarm fails the alarm row", source: "lmcache",
			edit: func(f *Facts) { f.State.Alarm.Endpoints[1].Reason = cachealarm.ReasonSilent },
			fail: chkAlarm + " ", fix: "cache signal dead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := correct(tc.source)
			tc.edit(&f)
			rows := Evaluate(f)
			var failed []string
			blocked := map[string]bool{}
			for _, r := range rows {
				key := r.Check + " " + r.Target
				switch r.Status {
				case Fail:
					failed = append(failed, key)
					if key == tc.fail && !strings.Contains(r.Fix, tc.fix) {
						t.Errorf("row %q: fix %q does not say %q", key, r.Fix, tc.fix)
					}
				case Blocked:
					blocked[key] = true
				}
			}
			want := 0
			if tc.fail != "" {
				want = 1
			}
			if len(failed) != want || (want > 0 && failed[0] != tc.fail) {
				var b bytes.Buffer
				_ = Write(&b, rows)
				t.Fatalf("failed rows %q, want %q alone:\n%s", failed, tc.fail, b.String())
			}
			for _, k := range tc.blocked {
				if !blocked[k] {
					t.Errorf("row %q is not blocked", k)
				}
			}
			if len(blocked) != len(tc.blocked) {
				t.Errorf("blocked rows %v, want %v", blocked, tc.blocked)
			}
			if Passed(rows) != (tc.fail == "") {
				t.Errorf("Passed = %v with failed rows %q", Passed(rows), failed)
			}
		})
	}
}

// TestEvaluateWithoutTokenizerSkipsParity: with no tokenizer the parity row of every
// engine is a skip that says text prompts lose the cache signal and how to give it one.
func TestEvaluateWithoutTokenizerSkipsParity(t *testing.T) {
	f := correct("lmcache")
	f.State.Tokenizer = ""
	n := 0
	for _, r := range Evaluate(f) {
		if r.Check != chkTokenizer {
			continue
		}
		n++
		if r.Status != Skip || !strings.Contains(r.Detail, "text and chat prompts on load alone") || !strings.Contains(r.Detail, "--tokenizer PATH") {
			t.Errorf("row %+v, want a skip naming text prompts and --tokenizer PATH", r)
		}
	}
	if n != len(f.Engines) {
		t.Errorf("%d parity rows, want one per engine (%d)", n, len(f.Engines))
	}
}

func TestEvaluateRowsPerSource(t *testing.T) {
	for _, tc := range []struct {
		source string
		has    []string
		hasNot []string
	}{
		{"lmcache", []string{chkPorts, chkRegister, chkHeartbeat, chkCredit}, []string{chkEvPort, chkStream, chkGaps}},
		{"vllm-events", []string{chkEvPort, chkStream, chkGaps, chkCredit}, []string{chkPorts, chkRegister}},
		{"both", []string{chkPorts, chkRegister, chkStream, chkGaps, chkCredit}, nil},
	} {
		t.Run(tc.source, func(t *testing.T) {
			seen := map[string]bool{}
			for _, r := range Evaluate(correct(tc.source)) {
				seen[r.Check] = true
			}
			for _, c := range tc.has {
				if !seen[c] {
					t.Errorf("no %q row", c)
				}
			}
			for _, c := range tc.hasNot {
				if seen[c] {
					t.Errorf("a %q row for cache source %s", c, tc.source)
				}
			}
		})
	}
}

func TestWrite(t *testing.T) {
	f := correct("lmcache")
	f.Ports[0].Err = "connection refused"
	var b bytes.Buffer
	if err := Write(&b, Evaluate(f)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"STATUS", "FAIL", chkPorts, "fix:", "expose the controller ports", "1 of "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
