package gctune

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
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

func TestWithPretouch(t *testing.T) {
	const mib = 1 << 20
	env := func(godebug string) func(string) string {
		return func(k string) string {
			if k == "GODEBUG" {
				return godebug
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name      string
		in        Settings
		godebug   string
		wantGC    int
		wantTouch int64
		why       string
	}{
		{"a limit and GOGC of ours, eager release", Settings{GCPercent: 400, MemoryLimit: 900 * mib}, "", -1, int64(900 * mib * PretouchEagerShare), "holds 837 MiB (93% of the limit)"},
		{"lazy release", Settings{GCPercent: 400, MemoryLimit: 900 * mib}, "madvdontneed=0", -1, 900 * mib, "holds 900 MiB (all the limit)"},
		{"lazy release among other settings", Settings{GCPercent: 400, MemoryLimit: 900 * mib}, "gctrace=1,madvdontneed=0", -1, 900 * mib, "stays resident"},
		{"eager release asked for", Settings{GCPercent: 400, MemoryLimit: 900 * mib}, "madvdontneed=1", -1, int64(900 * mib * PretouchEagerShare), "madvdontneed=0 would keep"},
		{"no limit", Settings{}, "madvdontneed=0", 0, 0, "not pre-touched"},
		{"GOMEMLIMIT from the environment", Settings{GCPercent: 400}, "", 400, 0, "not pre-touched"},
		{"GOGC from the environment", Settings{MemoryLimit: 900 * mib}, "", 0, 0, "not pre-touched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := WithPretouch(tc.in, env(tc.godebug))
			if s.GCPercent != tc.wantGC || s.Pretouch != tc.wantTouch || s.MemoryLimit != tc.in.MemoryLimit || !strings.Contains(s.Why, tc.why) {
				t.Errorf("WithPretouch(%+v, GODEBUG=%q) = %+v, want GOGC %d, pretouch %d, a reason containing %q", tc.in, tc.godebug, s, tc.wantGC, tc.wantTouch, tc.why)
			}
		})
	}
}

func TestLazyRelease(t *testing.T) {
	for in, want := range map[string]bool{
		"":                              false,
		"madvdontneed=0":                true,
		"madvdontneed=1":                false,
		"gctrace=1, madvdontneed=0":     true,
		"madvdontneed=0,madvdontneed=1": false,
		"madvdontneed=1,madvdontneed=0": true,
		"xmadvdontneed=0":               false,
		"madvdontneed=00":               false,
	} {
		if got := LazyRelease(in); got != want {
			t.Errorf("LazyRelease(%q) = %v, want %v", in, got, want)
		}
	}
}

// Apply with Pretouch writes the heap until the runtime's mapped memory reaches it, leaves
// that memory resident and held as free heap (the next allocations of that size find it
// mapped), and sets the memory limit after.
func TestApplyPretouchStaysResident(t *testing.T) {
	gogc, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
		debug.FreeOSMemory()
	})
	const n = 64 << 20
	before, rssBefore := Mapped(), rssAnon(t)
	target := before + n
	Apply(Settings{GCPercent: -1, MemoryLimit: 4 * target, Pretouch: target})
	if got := Mapped(); got < target {
		t.Errorf("the runtime holds %d MiB after pre-touching up to %d MiB", got>>20, target>>20)
	}
	if got := rssAnon(t) - rssBefore; got < n*9/10 {
		t.Errorf("RssAnon rose %d MiB after pre-touching %d MiB more", got>>20, n>>20)
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	if free := s[0].Value.Uint64(); free < n*9/10 {
		t.Errorf("the runtime holds %d MiB of free mapped heap after pre-touching %d MiB more", free>>20, n>>20)
	}
	if got := debug.SetMemoryLimit(-1); got != 4*target {
		t.Errorf("memory limit %d after Apply, want %d", got, 4*target)
	}
}

// rssAnon is the process's resident anonymous memory in bytes (/proc/self/status).
func rssAnon(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no RssAnon in /proc/self/status")
	return 0
}
