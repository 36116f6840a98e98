package capture

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// within4 is the published CSV's rounding (4 decimals) plus the fixture's
// microsecond rounding of the times.
const within4 = 0.5e-4 + 1e-6

func embedded(t *testing.T) Compact {
	t.Helper()
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEmbeddedShape(t *testing.T) {
	c := embedded(t)
	if !strings.Contains(c.Source, "results/gen2-confirmatory/") {
		t.Errorf("source %q does not say where the data comes from", c.Source)
	}
	want := []struct{ name, label string }{
		{"20260805-230541-kvaware", "kvaware"},
		{"20260805-232541-loadaware-b0.5", "loadaware-b0.5"},
		{"20260805-234559-loadaware-b1.0", "loadaware-b1"},
		{"20260806-000626-loadaware-b2.0", "loadaware-b2"},
		{"20260806-002645-loadaware-b0", "loadaware-b0"},
		{"20260806-144135-roundrobin", "roundrobin"},
	}
	if len(c.Cells) != len(want) {
		t.Fatalf("%d cells, want %d", len(c.Cells), len(want))
	}
	for i, w := range want {
		cc := c.Cells[i]
		if cc.Name != w.name || cc.ArmLabel() != w.label || cc.Rate != 16 || !(cc.Start < cc.End) {
			t.Errorf("cell %d: %s %s rate %v window %v..%v", i, cc.Name, cc.ArmLabel(), cc.Rate, cc.Start, cc.End)
		}
		if len(cc.Seeds) != 20 || len(cc.SeedMetrics) != 20 || len(cc.Published) != 20 || len(cc.Running) != 2 {
			t.Fatalf("%s: %d seeds, %d seed metrics, %d published, %d running series",
				cc.Name, len(cc.Seeds), len(cc.SeedMetrics), len(cc.Published), len(cc.Running))
		}
		for j, s := range cc.Seeds {
			if s.Seed != j+1 || len(s.PrefixID) != 500 || len(s.Send) != 500 || len(s.TTFT) != 500 || len(s.E2E) != 500 || len(s.OK) != 500 {
				t.Errorf("%s seed %d: %d rows", cc.Name, s.Seed, len(s.PrefixID))
			}
		}
	}
	// The request sequence of a seed is the same in every cell.
	for _, cc := range c.Cells[1:] {
		for j := range cc.Seeds {
			if !slicesEqual(cc.Seeds[j].PrefixID, c.Cells[0].Seeds[j].PrefixID) {
				t.Errorf("%s seed %d: prefix sequence differs from kvaware's", cc.Name, j+1)
			}
		}
	}
}

func slicesEqual(a, b []int) bool { return cmp.Equal(a, b) }

// TestEmbeddedReproducesPublished recomputes, for every seed of every cell,
// the TTFT percentiles, e2e p95, req/s and errors from the compact rows and
// the imbalance from the running series, and compares them with the published
// summary-per-seed.csv within its rounding.
func TestEmbeddedReproducesPublished(t *testing.T) {
	for _, cc := range embedded(t).Cells {
		for i, s := range cc.Seeds {
			pub := cc.Published[i]
			got := SeedMetrics(s.Requests())
			from, to := SendWindow(s.Requests())
			got[ImbalanceKey] = Imbalance(cc.Running, from, to)
			for _, k := range []string{TTFTP50, TTFTP90, TTFTP95, TTFTP99, TTFTMean, E2EMean, E2EP95, E2EP99, ReqS, OKCount, Errors, ImbalanceKey} {
				p, ok := pub[k]
				if !ok {
					t.Fatalf("%s seed %d: published has no %s", cc.Name, s.Seed, k)
				}
				if math.Abs(got[k]-p) > within4 {
					t.Errorf("%s seed %d %s: recomputed %.6f, published %.4f", cc.Name, s.Seed, k, got[k], p)
				}
			}
		}
	}
}

// TestEmbeddedSeedMetricsMatchPublished: the stored SeedMetrics (computed
// from the full rows, ITL included) agree with every published column.
func TestEmbeddedSeedMetricsMatchPublished(t *testing.T) {
	for _, cc := range embedded(t).Cells {
		for i, pub := range cc.Published {
			if len(pub) != len(PublishedColumns) {
				t.Errorf("%s seed %d: %d published columns, want %d", cc.Name, i+1, len(pub), len(PublishedColumns))
			}
			for k, p := range pub {
				if got := cc.SeedMetrics[i][k]; math.Abs(got-p) > 0.5e-4+1e-9 {
					t.Errorf("%s seed %d %s: stored %.6f, published %.4f", cc.Name, i+1, k, got, p)
				}
			}
			if st := cc.SeedMetrics[i][ITLStall]; !(st >= 0 && st <= 1) {
				t.Errorf("%s seed %d: stall share %v", cc.Name, i+1, st)
			}
		}
	}
}

// TestEmbeddedFacts: Facts recomputed from the kept series equal the stored
// ones, and match the facts the published data's README lists.
func TestEmbeddedFacts(t *testing.T) {
	hit := map[string]float64{"kvaware": 0.912, "loadaware-b0": 0.913, "loadaware-b0.5": 0.907,
		"loadaware-b1": 0.879, "loadaware-b2": 0.861, "roundrobin": 0.682}
	for _, cc := range embedded(t).Cells {
		f, err := cc.Cell().Facts()
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(cc.Facts, f, cmpopts.EquateNaNs()); d != "" {
			t.Errorf("%s: facts from the kept series differ (-stored +recomputed):\n%s", cc.Name, d)
		}
		label := cc.ArmLabel()
		if math.Abs(f.HitRate-hit[label]) > 0.0005 {
			t.Errorf("%s: hit rate %.4f, want %.3f", label, f.HitRate, hit[label])
		}
		if !strings.HasPrefix(f.Instances[0], "10.130.") || !strings.HasPrefix(f.Instances[1], "10.131.") {
			t.Errorf("%s: instances %v", label, f.Instances)
		}
		cacheAware := label != "roundrobin"
		if cacheAware && (f.Preemptions[0] != 0 || f.Preemptions[1] != 0 || f.WaitingShare > 0.01) {
			t.Errorf("%s: preemptions %v, waiting share %v: the cache-aware fleet never queued", label, f.Preemptions, f.WaitingShare)
		}
		if !cacheAware && (f.Preemptions[0] == 0 || f.WaitingShareEngine[0] < 0.5) {
			t.Errorf("roundrobin: preemptions %v, waiting %v: the 10.130 engine queues", f.Preemptions, f.WaitingShareEngine)
		}
		if label == "kvaware" && !(f.RequestShare[1] > 0.6 && f.RequestShare[1] < 0.7 && f.KVUsageMax[1] < 0.85) {
			t.Errorf("kvaware: request share %v, KV max %v", f.RequestShare, f.KVUsageMax)
		}
	}
}

func TestEmbeddedIsFresh(t *testing.T) {
	a, b := embedded(t), embedded(t)
	a.Cells[0].Seeds[0].TTFT[0] = -1
	a.Cells[0].SeedMetrics[0][TTFTP95] = -1
	if b.Cells[0].Seeds[0].TTFT[0] == -1 || b.Cells[0].SeedMetrics[0][TTFTP95] == -1 {
		t.Error("Embedded results share memory")
	}
}

// TestCompactRoundTrip: BuildCompact on a synthetic directory (with a
// summary), written and read back, is unchanged, NaN and +Inf included.
func TestCompactRoundTrip(t *testing.T) {
	root := t.TempDir()
	writeGoodCell(t, root, "c1", "null")
	writeGoodCell(t, root, "c2", `"2.0"`)
	writeFile(t, root, SummaryFile, "run,seed,ttft_p95,imbalance,beta\nc1,1,0.3,2.5,\nc1,2,0.3,,\nc2,1,0.1,1,2\nc2,2,0.2,1,2\n")
	c, err := BuildCompact(root)
	if err != nil {
		t.Fatal(err)
	}
	c.Cells[0].SeedMetrics[0][ImbalanceKey] = math.Inf(1)
	if !math.IsNaN(c.Cells[0].SeedMetrics[1][ImbalanceKey]) || c.Cells[0].Published[0][TTFTP95] != 0.3 ||
		c.Cells[1].Published[1][ImbalanceKey] != 1 || len(c.Cells[0].Published[1]) != 1 {
		t.Fatalf("built: %+v %+v", c.Cells[0].SeedMetrics, c.Cells[0].Published)
	}
	var buf bytes.Buffer
	if err := WriteCompact(&buf, c); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCompact(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(c, back, cmpopts.EquateNaNs(), cmpopts.EquateEmpty()); d != "" {
		t.Errorf("round trip (-built +read):\n%s", d)
	}
	// A cell directory finds the summary in its parent.
	one, err := BuildCompact(root + "/c2")
	if err != nil || len(one.Cells) != 1 || one.Cells[0].Published[0][TTFTP95] != 0.1 {
		t.Errorf("BuildCompact(cell dir) = %+v, %v", one, err)
	}
}

func TestBuildCompactBadSummary(t *testing.T) {
	cases := []struct {
		name, summary string
		want          []string
	}{
		{"missing seed row", "run,seed,ttft_p95\nc,1,0.3\n", []string{SummaryFile, "run c seed 2"}},
		{"bad number", "run,seed,ttft_p95\nc,1,0.3\nc,2,x\n", []string{SummaryFile, "line 3", "ttft_p95"}},
		{"no run column", "cell,seed\nc,1\n", []string{SummaryFile, `"run"`}},
		{"duplicate row", "run,seed\nc,1\nc,1\n", []string{SummaryFile, "twice"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeGoodCell(t, root, "c", "1")
			writeFile(t, root, SummaryFile, tc.summary)
			_, err := BuildCompact(root)
			mustContain(t, err, tc.want...)
		})
	}
}

func TestReadCompactBad(t *testing.T) {
	if _, err := ReadCompact(strings.NewReader("not gzip")); err == nil {
		t.Error("non-gzip input accepted")
	}
	var buf bytes.Buffer
	if err := WriteCompact(&buf, Compact{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCompact(&buf); err != nil {
		t.Errorf("empty compact: %v", err)
	}
}
