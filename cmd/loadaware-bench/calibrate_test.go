package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCalibrateRanksGridPointsOnTheReplay(t *testing.T) {
	out, _ := runCmd(t, "calibrate", "-seeds", "2", "-slowdown", "3,1.3", "-progress=false")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "loss\tfailed\tdiscordant\teffect_mismatch\tslowdown\t") {
		t.Fatalf("want a header and two points:\n%s", out)
	}
	// An engine three times slower than measured is the worse point.
	if f := strings.Split(lines[1], "\t"); f[4] != "1.3" {
		t.Fatalf("best point %q: want slowdown 1.3 first", lines[1])
	}
	var o, e bytes.Buffer
	if code := run(context.Background(), []string{"calibrate", "-admit-ms", "x"}, &o, &e); code != 2 || !strings.Contains(e.String(), "-admit-ms") {
		t.Fatalf("bad grid: exit %d, %q", code, e.String())
	}
}
