package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/capture"
)

// small returns the embedded gen2 fixture cut to the given arms and their
// first n seeds.
func small(t *testing.T, n int, arms ...string) capture.Compact {
	t.Helper()
	c, err := capture.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var kept []capture.CompactCell
	for _, a := range arms {
		for _, cc := range c.Cells {
			if cc.ArmLabel() == a {
				cc.Seeds, cc.SeedMetrics = cc.Seeds[:n], cc.SeedMetrics[:n]
				kept = append(kept, cc)
			}
		}
	}
	if len(kept) != len(arms) {
		t.Fatalf("fixture has %d of the arms %v", len(kept), arms)
	}
	c.Cells = kept
	return c
}

func TestReplayIsDeterministicAndComplete(t *testing.T) {
	data := small(t, 3, "kvaware", "loadaware-b1")
	var out [2]string
	for i := range out {
		opt := DefaultOptions()
		opt.Workers = 2 - i // the number of workers must not change the result
		rep, err := Run(context.Background(), data, opt)
		if err != nil {
			t.Fatal(err)
		}
		for j := range rep.Cells {
			rep.Cells[j].Elapsed = 0
		}
		rep.Elapsed = 0
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		out[i] = b.String()
	}
	if out[0] != out[1] {
		t.Fatal("two replays of the same cells differ")
	}
	var doc struct {
		Cells []struct {
			Cell    string             `json:"cell"`
			Arm     string             `json:"arm"`
			HitRate map[string]float64 `json:"hit_rate"`
			Seeds   []struct {
				Seed int                `json:"seed"`
				Real map[string]float64 `json:"real"`
				Sim  map[string]float64 `json:"sim"`
			} `json:"seeds"`
		} `json:"cells"`
		Effects []struct {
			Arm    string `json:"arm"`
			Metric string `json:"metric"`
		} `json:"effects"`
	}
	if err := json.Unmarshal([]byte(out[0]), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != 2 || doc.Cells[0].Arm != "kvaware" || doc.Cells[1].Arm != "loadaware-b1" {
		t.Fatalf("cells %+v: want kvaware then loadaware-b1", doc.Cells)
	}
	for _, c := range doc.Cells {
		if len(c.Seeds) != 3 {
			t.Fatalf("%s: %d seeds, want 3", c.Arm, len(c.Seeds))
		}
		if _, ok := c.HitRate["sim"]; !ok || c.HitRate["real"] < 0.8 {
			t.Errorf("%s: hit rate %v: want real (~0.9) and sim", c.Arm, c.HitRate)
		}
		for _, s := range c.Seeds {
			for _, m := range []string{"ttft_p50", "ttft_p95", "ttft_p99", "itl_p95", "e2e_p95", "req_s", "imbalance"} {
				r, okr := s.Real[m]
				v, oks := s.Sim[m]
				if !okr || !oks || !(r > 0) || !(v > 0) {
					t.Errorf("%s seed %d %s: real %v sim %v: want both positive", c.Arm, s.Seed, m, r, v)
				}
			}
		}
	}
	if len(doc.Effects) != 2 || doc.Effects[0].Arm != "loadaware-b1" {
		t.Fatalf("effects %+v: want loadaware-b1 against kvaware on two metrics", doc.Effects)
	}
}

// The real side of the comparison is bench/capture's computation from the
// measured data, untouched; the simulated side is the same computation on
// the simulated rows, so a simulated seed differs from its real twin.
func TestRealSideIsTheMeasuredMetrics(t *testing.T) {
	data := small(t, 2, "kvaware")
	rep, err := Run(context.Background(), data, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range rep.Cells[0].Seeds {
		want := data.Cells[0].SeedMetrics[i]
		for _, m := range Metrics {
			if got := s.Real[m]; got != want[m] && !(math.IsNaN(got) && math.IsNaN(want[m])) {
				t.Errorf("seed %d %s: real %v, fixture %v", s.Seed, m, got, want[m])
			}
		}
		if s.Sim[capture.TTFTP95] == s.Real[capture.TTFTP95] {
			t.Errorf("seed %d: simulated TTFT p95 equals the real one (%v): the sim side must be simulated", s.Seed, s.Sim[capture.TTFTP95])
		}
	}
	if rep.Cells[0].Facts["request_share"].Sim == nil {
		t.Error("no simulated engine facts")
	}
	for _, s := range rep.Cells[0].Seeds {
		r, m := s.RealFacts["request_share"], s.SimFacts["request_share"]
		if len(r) != 2 || len(m) != 2 || !(r[0] >= r[1]) || math.Abs(r[0]+r[1]-1) > 1e-9 || math.Abs(m[0]+m[1]-1) > 1e-9 {
			t.Errorf("seed %d request shares real %v sim %v: want two shares summing to 1, the busiest first on the real side", s.Seed, r, m)
		}
	}
}

func TestRunRejectsBadCells(t *testing.T) {
	base := small(t, 1, "kvaware")
	tests := []struct {
		name string
		edit func(*capture.Compact)
		want string
	}{
		{"no cells", func(c *capture.Compact) { c.Cells = nil }, "no cells"},
		{"unknown policy", func(c *capture.Compact) { c.Cells[0].Arm = "fastest" }, "fastest"},
		{"prefix outside the pool", func(c *capture.Compact) {
			s := &c.Cells[0].Seeds[0]
			s.PrefixID = append([]int(nil), s.PrefixID...)
			s.PrefixID[3] = 500
		}, "prefix 500"},
		{"send times out of order", func(c *capture.Compact) {
			s := &c.Cells[0].Seeds[0]
			s.Send = append([]float64(nil), s.Send...)
			s.Send[5] = s.Send[0] - 1
		}, "send order"},
		{"no requests", func(c *capture.Compact) { c.Cells[0].Seeds[0] = capture.CompactSeed{Seed: 1} }, "no requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.Cells = append([]capture.CompactCell(nil), base.Cells...)
			c.Cells[0].Seeds = append([]capture.CompactSeed(nil), base.Cells[0].Seeds...) // edits must not reach base
			tt.edit(&c)
			_, err := Run(context.Background(), c, DefaultOptions())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestWriteTextShowsEveryArmAndVerdict(t *testing.T) {
	rep, err := Run(context.Background(), small(t, 2, "kvaware", "roundrobin"), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"| kvaware |", "| roundrobin |", "Ordering on ttft_p95", "Paired effects against kvaware", "rank correlation", "tolerance checks outside"} {
		if !strings.Contains(s, want) {
			t.Errorf("text report lacks %q", want)
		}
	}
}
