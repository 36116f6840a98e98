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
		touched   bool
		wantWarn  bool
		wantLimit int64
	}{
		{"off", false, 1 << 30, 0, nil, false, false, 1 << 30},
		{"under --memory-limit", true, 1 << 30, 0, nil, true, false, 1 << 30},
		{"under the container's limit", true, 0, cgroup, nil, true, false, containerLimit},
		{"no limit", true, 0, 0, nil, false, true, 0},
		{"GOGC set by the operator", true, 1 << 30, 0, map[string]string{"GOGC": "100"}, false, true, 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := options{heapPretouch: tc.pretouch, memoryLimit: tc.limit, gcPercent: gctune.DefaultGCPercent}
			gc, warn := collectorPlan(o, env(tc.env), tc.cgroup)
			if touched := gc.Pretouch > 0; touched != tc.touched {
				t.Errorf("pre-touch %d bytes, want pre-touched %v (%s)", gc.Pretouch, tc.touched, gc.Why)
			}
			if tc.touched && (gc.GCPercent != -1 || gc.Pretouch != int64(float64(gc.MemoryLimit)*gctune.PretouchShare)) {
				t.Errorf("pre-touched plan GOGC %d, %d bytes of a %d limit: want GOGC off and %v of the limit", gc.GCPercent, gc.Pretouch, gc.MemoryLimit, gctune.PretouchShare)
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
