package cachealarm

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	a = "10.0.0.1:8000"
	b = "10.0.0.2:8000"
)

var t0 = time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)

// step is what happens during one second of a scenario, before the tick at its end.
type step struct {
	prompts    map[string]int // routed per endpoint
	signals    map[string]int // credited cache events per endpoint
	uncredited map[string]int
	parity     map[string]bool
}

func newWatch(t *testing.T, log *bytes.Buffer) (*Watch, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	w, err := New(Config{Window: 10 * time.Second, MinPrompts: 3, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return w, reg
}

// run plays steps, one tick a second from t0+1s, and returns the alarms of every tick.
func run(w *Watch, eps []string, steps []step) [][]Alarm {
	var out [][]Alarm
	for i, s := range steps {
		for ep, n := range s.prompts {
			for range n {
				w.Routed(ep, nil)
			}
		}
		for ep, n := range s.signals {
			for range n {
				w.Signal(ep)
			}
		}
		for ep, n := range s.uncredited {
			for range n {
				w.Uncredited(ep)
			}
		}
		for ep, ok := range s.parity {
			w.Parity(ep, Sample{OK: ok, Detail: map[bool]string{false: "text: token 3 differs"}[ok]})
		}
		out = append(out, w.Tick(t0.Add(time.Duration(i+1)*time.Second), eps))
	}
	return out
}

// repeat is n copies of s.
func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestTick(t *testing.T) {
	healthy := step{prompts: map[string]int{a: 2, b: 2}, signals: map[string]int{a: 5, b: 5}}
	bSilent := step{prompts: map[string]int{a: 2, b: 2}, signals: map[string]int{a: 5}}
	bUncredited := step{prompts: map[string]int{a: 2, b: 2}, signals: map[string]int{a: 5}, uncredited: map[string]int{b: 5}}
	for _, tc := range []struct {
		name  string
		steps []step
		// firstAlarm is the 1-based tick of b's first alarm, 0 for none; reason its reason.
		firstAlarm int
		reason     string
		logged     int // alarm lines logged for b over the scenario
	}{
		{name: "a healthy fleet never alarms", steps: repeat(60, healthy)},
		{name: "an idle endpoint that sends nothing is not in alarm",
			steps: repeat(60, step{prompts: map[string]int{a: 2}, signals: map[string]int{a: 5}})},
		{name: "too few prompts to an endpoint that sends nothing is not in alarm",
			steps: append(repeat(10, healthy), repeat(50, step{prompts: map[string]int{a: 2}, signals: map[string]int{a: 5}})...)},
		{name: "events that stop while prompts keep coming alarm one window later",
			steps: append(repeat(10, healthy), repeat(10, bSilent)...), firstAlarm: 20, reason: ReasonSilent, logged: 1},
		{name: "an endpoint that never sent anything alarms one window after its first tick",
			steps: repeat(11, bSilent), firstAlarm: 11, reason: ReasonSilent, logged: 1},
		{name: "an endpoint in alarm is logged once per window",
			steps: append(repeat(10, healthy), repeat(35, bSilent)...), firstAlarm: 20, reason: ReasonSilent, logged: 3},
		{name: "events credited to no endpoint alarm as uncredited",
			steps: append(repeat(10, healthy), repeat(10, bUncredited)...), firstAlarm: 20, reason: ReasonUncredited, logged: 1},
		{name: "a tokenizer that differs alarms at once, prompts or not",
			steps: []step{healthy, {parity: map[string]bool{b: false}}}, firstAlarm: 2, reason: ReasonTokenizer, logged: 1},
		{name: "a parity sample that passes again clears the alarm",
			steps:      []step{healthy, {parity: map[string]bool{b: false}}, {parity: map[string]bool{b: true}}, healthy},
			firstAlarm: 2, reason: ReasonTokenizer, logged: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			w, reg := newWatch(t, &log)
			ticks := run(w, []string{a, b}, tc.steps)
			first, reason := 0, ""
			for i, alarms := range ticks {
				for _, al := range alarms {
					if al.Endpoint == a {
						t.Fatalf("tick %d: %s in alarm (%s), it stayed healthy", i+1, a, al.Reason)
					}
					if first == 0 {
						first, reason = i+1, al.Reason
					}
				}
			}
			if first != tc.firstAlarm || reason != tc.reason {
				t.Fatalf("first alarm at tick %d (%q), want tick %d (%q)", first, reason, tc.firstAlarm, tc.reason)
			}
			if got := strings.Count(log.String(), "cache signal dead"); got != tc.logged {
				t.Fatalf("%d alarm lines logged, want %d:\n%s", got, tc.logged, log.String())
			}
			var counted float64
			for _, r := range Reasons {
				counted += testutil.ToFloat64(w.alarms.WithLabelValues(r))
			}
			if counted != float64(tc.logged) {
				t.Fatalf("loadaware_cache_signal_dead_alarms_total sums to %v, want %d", counted, tc.logged)
			}
			wantGauge := 0.0
			if len(ticks[len(ticks)-1]) > 0 {
				wantGauge = 1
			}
			if n, err := testutil.GatherAndCount(reg, "loadaware_cache_signal_dead"); err != nil || (n == 0) != (first == 0) {
				t.Fatalf("loadaware_cache_signal_dead has %d series (%v); an alarm was raised: %v", n, err, first != 0)
			}
			if first != 0 {
				if got := testutil.ToFloat64(w.gauge.WithLabelValues(b)); got != wantGauge {
					t.Fatalf("loadaware_cache_signal_dead{endpoint=%q} = %v at the end, want %v", b, got, wantGauge)
				}
			}
		})
	}
}

func TestAlarmClearsWhenEventsReturn(t *testing.T) {
	var log bytes.Buffer
	w, _ := newWatch(t, &log)
	bSilent := step{prompts: map[string]int{a: 2, b: 2}, signals: map[string]int{a: 5}}
	ticks := run(w, []string{a, b}, append(repeat(11, bSilent), step{signals: map[string]int{b: 1}}))
	if len(ticks[10]) != 1 || len(ticks[11]) != 0 {
		t.Fatalf("alarms at ticks 11 and 12: %v, %v; want b, then none", ticks[10], ticks[11])
	}
	if !strings.Contains(log.String(), "cache signal back") {
		t.Fatalf("the alarm's end was not logged:\n%s", log.String())
	}
	if got := testutil.ToFloat64(w.gauge.WithLabelValues(b)); got != 0 {
		t.Fatalf("gauge = %v after the signal came back, want 0", got)
	}
}

func TestTickForgetsDepartedEndpoints(t *testing.T) {
	var log bytes.Buffer
	w, reg := newWatch(t, &log)
	run(w, []string{a, b}, repeat(11, step{prompts: map[string]int{a: 2, b: 2}, signals: map[string]int{a: 5}}))
	if n, _ := testutil.GatherAndCount(reg, "loadaware_cache_signal_dead"); n != 1 {
		t.Fatalf("%d gauge series with b in alarm, want b's", n)
	}
	w.Tick(t0.Add(12*time.Second), []string{a})
	if st := w.States(); len(st) != 1 || st[0].Endpoint != a {
		t.Fatalf("states after b left: %+v, want only %s", st, a)
	}
	if n, _ := testutil.GatherAndCount(reg, "loadaware_cache_signal_dead"); n != 0 {
		t.Fatalf("%d gauge series after b left, want none", n)
	}
}

func TestStates(t *testing.T) {
	var log bytes.Buffer
	w, _ := newWatch(t, &log)
	run(w, []string{a, b}, []step{{prompts: map[string]int{a: 4}, signals: map[string]int{a: 2}, uncredited: map[string]int{b: 3},
		parity: map[string]bool{a: true}}})
	st := w.States()
	if len(st) != 2 || st[0].Prompts != 4 || st[0].Signals != 2 || st[0].Parity == nil || !st[0].Parity.OK ||
		st[1].Uncredited != 3 || st[1].Parity != nil || st[0].Reason != "" {
		t.Fatalf("States = %+v", st)
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name           string
		picker, engine []uint32
		ok             bool
		detail         string
	}{
		{"equal", []uint32{1, 2, 3}, []uint32{1, 2, 3}, true, ""},
		{"a token differs", []uint32{1, 2, 3}, []uint32{1, 9, 3}, false, "chat: token 1 is 2 for the picker, 9 for the engine (3 and 3 tokens)"},
		{"the engine adds a token", []uint32{1, 2}, []uint32{1, 2, 3}, false, "chat: the picker has 2 tokens, the engine 3 (equal up to 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare("chat", tc.picker, tc.engine)
			if got.OK != tc.ok || got.Detail != tc.detail {
				t.Fatalf("Compare = %+v, want ok=%v %q", got, tc.ok, tc.detail)
			}
		})
	}
}

func TestParityChat(t *testing.T) {
	for _, model := range []string{"", `Qwen/"odd"`} {
		var body struct {
			Model    string `json:"model"`
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(ParityChat(model), &body); err != nil || body.Model != model || len(body.Messages) != 2 {
			t.Fatalf("ParityChat(%q) = %s (%v)", model, ParityChat(model), err)
		}
	}
}
