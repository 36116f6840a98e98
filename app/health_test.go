package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// TestObserveLogsEachTransitionWithItsStatus feeds response statuses to a healthWatch and
// checks that an endpoint leaves and rejoins the candidates on them, logging the status
// that moved it, and that statuses which move nothing log nothing.
func TestObserveLogsEachTransitionWithItsStatus(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		name      string
		statuses  []int
		healthy   bool
		wantLog   []string // substrings, in order
		wantQuiet bool
		lateLast  bool // the last status answers a request routed before the others
	}{
		{name: "successes move nothing", statuses: []int{200, 404, 500}, healthy: true, wantQuiet: true},
		{name: "one 503 is not enough", statuses: []int{503}, healthy: true, wantQuiet: true},
		{name: "two 502s eject", statuses: []int{200, 502, 502}, healthy: false,
			wantLog: []string{"endpoint unhealthy", "response status 502"}},
		{name: "a 504 then a 503 eject", statuses: []int{504, 503}, healthy: false,
			wantLog: []string{"endpoint unhealthy", "response status 503"}},
		{name: "a success brings it back", statuses: []int{502, 502, 200}, healthy: true,
			wantLog: []string{"endpoint unhealthy", "response status 502", "endpoint healthy again", "response status 200"}},
		{name: "a late success from before the failures leaves it out", statuses: []int{502, 502, 200}, lateLast: true, healthy: false,
			wantLog: []string{"endpoint unhealthy", "response status 502"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			w, err := newHealthWatch(HealthConfig{Policy: fleet.HealthPolicy{PassiveFailures: 2, Ejection: time.Minute, MaxEjection: time.Hour},
				Now: func() time.Time { return now }}, slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range c.statuses {
				decided := now
				if c.lateLast && i == len(c.statuses)-1 {
					decided = now.Add(-time.Second)
				}
				w.observe("10.0.0.1:8000", s, decided)
			}
			if got := w.h.Healthy("10.0.0.1:8000", now); got != c.healthy {
				t.Fatalf("healthy %v after %v, want %v", got, c.statuses, c.healthy)
			}
			if c.lateLast && strings.Contains(logs.String(), "healthy again") {
				t.Fatalf("a late success ended the ejection: %q", logs.String())
			}
			if c.wantQuiet && logs.Len() != 0 {
				t.Fatalf("logged %q for statuses that move nothing", logs.String())
			}
			rest := logs.String()
			for _, want := range c.wantLog {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("log %q lacks %q", logs.String(), want)
				}
				rest = rest[i+len(want):]
			}
		})
	}
}
