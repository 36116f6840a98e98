package gctune

import (
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	const gib = 1 << 30
	var container int64 = 2 * gib
	shared := int64(float64(container) * LimitShare) // what Plan gives of a 2 GiB container
	for _, tc := range []struct {
		name      string
		getenv    func(string) string
		cgroup    int64
		limitFlag int64
		wantGC    int
		wantLimit int64
		why       string
	}{
		{"no container, no flag", env(), 0, 0, 0, 0, "no memory limit"},
		{"container limit", env(), 2 * gib, 0, 400, shared, "GOGC 400 under a memory limit (90% of the container's 2.0 GiB) of 1.8 GiB"},
		{"explicit limit wins over the container", env(), 2 * gib, gib, 400, gib, "--memory-limit"},
		{"limit off", env(), 2 * gib, -1, 0, 0, "no memory limit"},
		{"GOMEMLIMIT is the operator's", env("GOMEMLIMIT", "1GiB"), 2 * gib, 0, 400, 0, "GOMEMLIMIT=1GiB from the environment"},
		{"GOGC is the operator's", env("GOGC", "50"), 2 * gib, 0, 0, shared, "GOGC=50 from the environment"},
		{"GOGC alone, no limit", env("GOGC", "50"), 0, 0, 0, 0, "no memory limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Plan(tc.getenv, tc.cgroup, DefaultGCPercent, tc.limitFlag)
			if s.GCPercent != tc.wantGC || s.MemoryLimit != tc.wantLimit || !strings.Contains(s.Why, tc.why) {
				t.Errorf("Plan = %+v, want GOGC %d, limit %d, a reason containing %q", s, tc.wantGC, tc.wantLimit, tc.why)
			}
		})
	}
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"2147483648\n":        2147483648,
		"max\n":               0,
		"9223372036854771712": 0, // cgroup v1's "no limit"
		"":                    0,
		"-1":                  0,
		"12abc":               0,
	} {
		if got := parseLimit(in); got != want {
			t.Errorf("parseLimit(%q) = %d, want %d", in, got, want)
		}
	}
}
