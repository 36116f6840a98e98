package lmcache

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTestDetector(t *testing.T, cfg MissConfig) (*MissDetector, *bytes.Buffer, *prometheus.Registry) {
	t.Helper()
	var logs bytes.Buffer
	reg := prometheus.NewPedanticRegistry()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Registerer = reg
	d, err := NewMissDetector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, &logs, reg
}

func keysFrom(start, n int) []int64 {
	k := make([]int64, n)
	for i := range k {
		k[i] = int64(start + i)
	}
	return k
}

func TestMissDetector(t *testing.T) {
	type event struct {
		sent  []int64 // Sent to 10.0.0.1 when non-nil
		admit int64   // else Admitted by 10.0.0.1
		times int
	}
	sent := func(start int) event { return event{sent: keysFrom(start, 7), times: 1} }
	admit := func(k int64, n int) event { return event{admit: k, times: n} }
	tests := []struct {
		name      string
		cfg       MissConfig
		events    []event
		suspected bool
		warnings  int
	}{
		{"admits of sent prompts: healthy", MissConfig{},
			[]event{sent(0), sent(100), admit(3, 500), sent(200), sent(300), sent(400), sent(500), sent(600), sent(700), admit(105, 1)}, false, 0},
		{"admits that never match sent prompts: warning", MissConfig{},
			[]event{sent(0), sent(10), sent(20), sent(30), sent(40), sent(50), sent(60), sent(70), admit(-1, 200)}, true, 1},
		{"one admit short of the threshold", MissConfig{},
			[]event{sent(0), sent(10), sent(20), sent(30), sent(40), sent(50), sent(60), sent(70), admit(-1, 199)}, false, 0},
		{"too few prompts sent to judge", MissConfig{},
			[]event{sent(0), sent(10), sent(20), admit(-1, 1000)}, false, 0},
		{"warned once, however long it lasts", MissConfig{MinAdmits: 10, MinPrompts: 1},
			[]event{sent(0), admit(-1, 10), admit(-2, 100), sent(10), admit(-3, 100)}, true, 1},
		{"a match clears the suspicion", MissConfig{MinAdmits: 10, MinPrompts: 1},
			[]event{sent(0), admit(-1, 10), admit(6, 1)}, false, 1},
		{"it can be raised again after clearing", MissConfig{MinAdmits: 10, MinPrompts: 1},
			[]event{sent(0), admit(-1, 10), admit(6, 1), sent(10), admit(-1, 10)}, true, 2},
		{"only recent keys are remembered", MissConfig{RecentKeys: 14, MinAdmits: 5, MinPrompts: 1},
			[]event{sent(0), sent(100), sent(200), admit(0, 5)}, true, 1},
		{"admits from endpoints never sent a prompt are not judged", MissConfig{MinAdmits: 1, MinPrompts: 1},
			[]event{admit(-1, 100)}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, logs, _ := newTestDetector(t, tc.cfg)
			for _, e := range tc.events {
				for range e.times {
					if e.sent != nil {
						d.Sent("10.0.0.1:8000", e.sent)
					} else {
						d.Admitted("10.0.0.1", e.admit)
					}
				}
			}
			if got := len(d.Suspected()) == 1; got != tc.suspected {
				t.Errorf("suspected = %v (%v), want %v", got, d.Suspected(), tc.suspected)
			}
			if got := testutil.ToFloat64(d.warnings); got != float64(tc.warnings) {
				t.Errorf("warnings = %v, want %d", got, tc.warnings)
			}
			if got := strings.Count(logs.String(), "level=WARN"); got != tc.warnings {
				t.Errorf("logged %d warnings, want %d:\n%s", got, tc.warnings, logs)
			}
			if tc.warnings > 0 {
				g := testutil.ToFloat64(d.gauge.WithLabelValues("10.0.0.1"))
				if (g == 1) != tc.suspected {
					t.Errorf("silent_miss gauge = %v with suspected = %v", g, tc.suspected)
				}
			}
		})
	}
}

func TestMissWarningNamesTheCauses(t *testing.T) {
	d, logs, _ := newTestDetector(t, MissConfig{MinAdmits: 1, MinPrompts: 1, Keys: KeyConfig{HashSeed: "123", ChunkSize: 128, Format: KeyFormatV04}})
	d.Sent("[fd00::1]:8000", []int64{1})
	d.Admitted("fd00::1", 2)
	for _, want := range []string{"fd00::1", "PYTHONHASHSEED=123", "tokenizer", "chunk_size differs (picker: 128)", "key format differs (picker: v0.4", "lmcache-keys"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warning lacks %q:\n%s", want, logs)
		}
	}
}

func TestMissDetectorBoundsEndpoints(t *testing.T) {
	d, _, _ := newTestDetector(t, MissConfig{MaxEndpoints: 2, MinAdmits: 1, MinPrompts: 1})
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		d.Sent(ip, []int64{1})
		d.Admitted(ip, 2)
	}
	if got := d.Suspected(); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("Suspected = %v, want the first two endpoints only", got)
	}
}

func TestIndexFeedsTheDetector(t *testing.T) {
	d, _, _ := newTestDetector(t, MissConfig{MinAdmits: 3, MinPrompts: 1})
	ix := newTestIndex(t, IndexConfig{Detector: d})
	good, bad := prompt(1, 600), prompt(2, 600)
	d.Sent("10.0.0.1:8000", ix.ChunkKeys(good))
	d.Sent("10.0.0.2:8000", ix.ChunkKeys(good))
	applyAll(t, ix, cat(
		admits(t, "unregistered", 0, "cpu", bad, 0, 3), // no IP: not fed
		regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", good, 0, 3),
		regMsg("b", 0, "10.0.0.2"), admits(t, "b", 0, "cpu", bad, 0, 3),
	), t0)
	if got := d.Suspected(); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("Suspected = %v, want [10.0.0.2]", got)
	}
}
