package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemoHoldPassesCheck points loadaware-epp check, as the hold message prints it, at the
// held demo stack: a correct stack, so check exits 0 with every row pass or skip, and the
// credit rows and the registry probe through the gateway pass.
func TestDemoHoldPassesCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds loadaware-epp and runs the live demo")
	}
	epp := filepath.Join(t.TempDir(), "loadaware-epp")
	if out, err := exec.Command("go", "build", "-o", epp, "../loadaware-epp").CombinedOutput(); err != nil {
		t.Fatalf("go build loadaware-epp: %v\n%s", err, out)
	}
	t.Setenv("LOADAWARE_ADMIN_TOKEN", "") // the demo makes a token and prints it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut, code := startHeldDemo(ctx, t)
	m := regexp.MustCompile(`(?m)^  check:    LOADAWARE_ADMIN_TOKEN=([0-9a-f]{32}) loadaware-epp check -metrics (http://\S+/metrics) -gateway (http://\S+)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the hold message lacks the check command with a token:\n%s", out.String())
	}
	cmd := exec.Command(epp, "check", "-metrics", m[2], "-gateway", m[3])
	cmd.Env = append(os.Environ(), "LOADAWARE_ADMIN_TOKEN="+m[1])
	table, err := cmd.Output()
	if err != nil {
		t.Fatalf("check against the held demo: %v\n%s", err, table)
	}
	rows := 0
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "fix:" || f[0] == "all" {
			continue
		}
		rows++
		if f[0] != "pass" && f[0] != "skip" {
			t.Errorf("row %q is neither pass nor skip", line)
		}
	}
	words := strings.Join(strings.Fields(string(table)), " ")
	for _, want := range []string{"pass cache credited (hash seed, chunk size) 127.0.1.1:", "pass cache credited (hash seed, chunk size) 127.0.1.2:",
		"pass registry probe through the gateway"} {
		if !strings.Contains(words, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	if rows < 10 || t.Failed() {
		t.Fatalf("%d rows:\n%s", rows, table)
	}
	stopHeldDemo(t, cancel, code, errOut)
}
