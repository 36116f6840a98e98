package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
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

func TestReplaySubcommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r", "replay.json")
	out, _ := runCmd(t, "replay", "-cells", "kvaware", "-seeds", "2", "-json", path, "-quiet")
	if !strings.Contains(out, "| kvaware |") || strings.Contains(out, "| roundrobin |") {
		t.Fatalf("replay of kvaware alone:\n%s", out)
	}
	var doc struct {
		Cells []struct {
			Arm   string `json:"arm"`
			Seeds []struct {
				Seed int `json:"seed"`
			} `json:"seeds"`
		} `json:"cells"`
	}
	if err := json.Unmarshal([]byte(readFile(t, path)), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != 1 || doc.Cells[0].Arm != "kvaware" || len(doc.Cells[0].Seeds) != 2 {
		t.Fatalf("JSON %+v: want kvaware with 2 seeds", doc)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "-cells", "fastest"}, "the data has kvaware"},
		{[]string{"replay", "-seeds", "-1"}, "-seeds -1"},
		{[]string{"replay", "-real", t.TempDir()}, "no cell directories"},
		{[]string{"replay", "extra"}, "after -real"},
	} {
		var o, e bytes.Buffer
		if code := run(context.Background(), bad.args, &o, &e); code == 0 || !strings.Contains(e.String(), bad.want) {
			t.Errorf("%v: exit %d, %q: want a failure naming %q", bad.args, code, e.String(), bad.want)
		}
	}
}
