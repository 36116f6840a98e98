package main

import (
	"testing"

	"github.com/loadaware/loadaware-epp/gctune"
)

// --heap-pretouch pre-touches under a limit of the picker's own, and otherwise says why not.
func TestCollectorPlanPretouch(t *testing.T) {
	cgroup := int64(2 << 30)
	containerLimit := int64(float64(cgroup) * gctune.LimitShare)
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	tests := []struct {
		name      string
		pretouch  bool
		limit     int64 // --memory-limit
		cgroup    int64
		env       map[string]string
		touched   float64 // the share of the limit the heap is written up to; 0: not pre-touched
		wantWarn  bool
		wantLimit int64
	}{
		{"off", false, 1 << 30, 0, nil, 0, false, 1 << 30},
		{"under --memory-limit", true, 1 << 30, 0, nil, gctune.PretouchEagerShare, false, 1 << 30},
		{"under the container's limit", true, 0, cgroup, nil, gctune.PretouchEagerShare, false, containerLimit},
		{"lazy release", true, 0, cgroup, map[string]string{"GODEBUG": "madvdontneed=0"}, gctune.PretouchLazyShare, false, containerLimit},
		{"no limit", true, 0, 0, nil, 0, true, 0},
		{"GOGC set by the operator", true, 1 << 30, 0, map[string]string{"GOGC": "100"}, 0, true, 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := options{heapPretouch: tc.pretouch, memoryLimit: tc.limit, gcPercent: gctune.DefaultGCPercent}
			gc, warn := collectorPlan(o, env(tc.env), tc.cgroup)
			if want := int64(float64(gc.MemoryLimit) * tc.touched); gc.Pretouch != want {
				t.Errorf("pre-touch up to %d bytes, want %d: %v of the %d limit (%s)", gc.Pretouch, want, tc.touched, gc.MemoryLimit, gc.Why)
			}
			if tc.touched > 0 && gc.GCPercent != -1 {
				t.Errorf("pre-touched plan GOGC %d, want off", gc.GCPercent)
			}
			if (warn != "") != tc.wantWarn {
				t.Errorf("warning %q, want one: %v", warn, tc.wantWarn)
			}
			if gc.MemoryLimit != tc.wantLimit {
				t.Errorf("memory limit %d, want %d", gc.MemoryLimit, tc.wantLimit)
			}
		})
	}
}
