package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/stack"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// TestDriveABThroughTheGateway drives the published workload at a live stack (engines on the
// wall clock, the real picker, the gateway) through two arms switched on /admin/config, and
// reads the capture back as `replay -real` does: one cell per arm, every seed, every request,
// the engines' running counts, and the picker left on the last arm.
func TestDriveABThroughTheGateway(t *testing.T) {
	ctx := context.Background()
	// Engines 20 times faster than the calibrated A10s: requests overlap, so the running counts
	// (and the imbalance) are not all zero.
	s, err := stack.Start(ctx, stack.Config{Engines: 2, Policy: "roundrobin", AdminToken: "t0ken", Slowdown: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	engines := "http://" + s.Engines[0].Addr() + ",http://" + s.Engines[1].Addr()
	admin := "http://" + s.App.MetricsAddr()
	out := filepath.Join(t.TempDir(), "capture")
	t.Setenv("LOADAWARE_ADMIN_TOKEN", "t0ken")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"drive", "-target", s.URL, "-engines", engines, "-admin", admin, "-arms", "kvaware,loadaware-b0.5",
		"-workload", "published", "-seeds", "1-2", "-requests", "12", "-prompt", "ids", "-scrape-every", "20ms",
		"-seed-gap", "0s", "-progress=false", "-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("drive exited %d:\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "does not start cold") {
		t.Errorf("drive did not say the second cell is not cold (no -reset-url):\n%s", stderr.String())
	}
	cells, err := capture.Load(out)
	if err != nil {
		t.Fatalf("the capture does not load as replay -real reads it: %v", err)
	}
	if len(cells) != 2 || cells[0].ArmLabel() != "kvaware" || cells[1].ArmLabel() != "loadaware-b0.5" {
		t.Fatalf("cells %v, want kvaware and loadaware-b0.5", cells)
	}
	for _, c := range cells {
		if len(c.Seeds) != 2 {
			t.Fatalf("%s: %d seeds, want 2", c.Name, len(c.Seeds))
		}
		for _, sd := range c.Seeds {
			if len(sd.Requests) != 12 {
				t.Fatalf("%s seed %d: %d rows, want 12", c.Name, sd.Seed, len(sd.Requests))
			}
			for _, r := range sd.Requests {
				if !r.OK || !(r.TTFT > 0) || r.CompletionTokens == 0 {
					t.Fatalf("%s seed %d: request %+v did not complete through the gateway", c.Name, sd.Seed, r)
				}
			}
			if m := capture.SeedMetrics(sd.Requests); !(m[capture.TTFTP95] > 0) {
				t.Fatalf("%s seed %d: metrics %v", c.Name, sd.Seed, m)
			}
		}
		if n := len(c.Prom[capture.RunningMetric]); n != 2 {
			t.Fatalf("%s: %d engine series of %s, want one per engine", c.Name, n, capture.RunningMetric)
		}
	}
	resp, err := http.Get(admin + "/admin/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct {
		Policy string  `json:"policy"`
		Beta   float64 `json:"beta"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil || cfg.Policy != "loadaware" || cfg.Beta != 0.5 {
		t.Fatalf("the picker runs %+v (%v) after the A/B, want the last arm, loadaware at beta 0.5", cfg, err)
	}
	// compare pairs the capture's two arms seed by seed, on TTFT p95: every seed has one (checked
	// above), while a seed's imbalance is infinite when an arm left an engine idle and undefined
	// when a loaded host let no scrape land inside the run.
	var cmpOut, cmpErr bytes.Buffer
	if code := run(ctx, []string{"compare", "-dir", out, "-metric", "ttft_p95", "loadaware-b0.5", "kvaware"}, &cmpOut, &cmpErr); code != 0 {
		t.Fatalf("compare on the capture exited %d:\n%s", code, cmpErr.String())
	}
	if !strings.Contains(cmpOut.String(), "loadaware-b0.5") || !strings.Contains(cmpOut.String(), "kvaware") {
		t.Errorf("compare's output names neither arm:\n%s", cmpOut.String())
	}
	cmpErr.Reset()
	if code := run(ctx, []string{"compare", "-dir", out, "-metric", "hit_rate", "loadaware-b0.5", "kvaware"}, &cmpOut, &cmpErr); code == 0 || !strings.Contains(cmpErr.String(), "not a per-seed metric of a capture") {
		t.Errorf("compare on a capture's hit rate exited %d: %s", code, cmpErr.String())
	}

	// replay -real reads back what drive saw: per seed, the same TTFT p95 and imbalance.
	var replayOut, replayErr bytes.Buffer
	js := filepath.Join(t.TempDir(), "replay.json")
	if code := run(ctx, []string{"replay", "-real", out, "-quiet", "-json", js}, &replayOut, &replayErr); code != 0 {
		t.Fatalf("replay -real on the capture exited %d:\n%s", code, replayErr.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Cells []struct {
			Arm   string `json:"arm"`
			Seeds []struct {
				Seed int                 `json:"seed"`
				Real map[string]*float64 `json:"real"`
			} `json:"seeds"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^(\S+) seed (\d+): TTFT p95 (\S+) s, imbalance (\S+)$`)
	seen := line.FindAllStringSubmatch(stdout.String(), -1)
	if len(seen) != 4 {
		t.Fatalf("drive printed %d seed summaries, want 4:\n%s", len(seen), stdout.String())
	}
	compared := 0
	for _, m := range seen {
		for _, c := range rep.Cells {
			for _, sd := range c.Seeds {
				if (c.Arm != m[1] && c.Arm != strings.SplitN(m[1], "-", 2)[0]) || strconv.Itoa(sd.Seed) != m[2] {
					continue
				}
				ttft, _ := strconv.ParseFloat(m[3], 64)
				imb, _ := strconv.ParseFloat(m[4], 64)
				// A short run on a loaded host may leave an engine idle (imbalance +Inf) or
				// no request running at any scrape (NaN); replay's JSON writes a value that
				// is not finite as null.
				rt, ri := sd.Real[capture.TTFTP95], sd.Real[capture.ImbalanceKey]
				if rt == nil || math.Abs(ttft-*rt) > 1e-9 {
					t.Errorf("%s seed %s: drive saw TTFT p95 %v; replay -real reads %v", m[1], m[2], ttft, deref(rt))
				}
				if stats.Finite(imb) != (ri != nil) || (ri != nil && (math.Abs(imb-*ri) > 1e-9 || !(imb >= 1))) {
					t.Errorf("%s seed %s: drive saw imbalance %v; replay -real reads %v (null when not finite)", m[1], m[2], imb, deref(ri))
				}
				compared++
			}
		}
	}
	if compared != 4 {
		t.Fatalf("compared %d seeds with replay's, want 4 (replay JSON: %s)", compared, b)
	}
}

// deref prints a JSON number the test read, or null.
func deref(f *float64) any {
	if f == nil {
		return "null"
	}
	return *f
}
