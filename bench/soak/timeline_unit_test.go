package soak

import (
	"math"
	"testing"
	"time"
)

// tailSecond finds the second holding most of a window's requests over its p99, by their
// starts, and keeps to the window.
func TestTailSecond(t *testing.T) {
	ms := time.Millisecond
	// req is a request that started at start and took took.
	req := func(start, took time.Duration) result { return result{at: start + took, took: took} }
	// window is n requests 20 ms apart from from, each 10 ms, with slow ones (500 ms) starting
	// at the given offsets.
	window := func(from time.Duration, n int, slow ...time.Duration) []result {
		var rs []result
		for i := range n {
			rs = append(rs, req(from+time.Duration(i)*20*ms, 10*ms))
		}
		for _, s := range slow {
			rs = append(rs, req(s, 500*ms))
		}
		return rs
	}
	for _, tc := range []struct {
		name           string
		rs             []result
		from, to       time.Duration
		wantAt         time.Duration
		wantHeld, tail int
	}{
		// 500 fast requests over 10 s and 5 slow ones: the slow ones are the tail (over the
		// p99 of 505), four of them in the second from 6.2 s.
		{"clustered", window(0, 500, 6200*ms, 6500*ms, 6900*ms, 7100*ms, 2*time.Second), 0, 10 * time.Second, 6200 * ms, 4, 5},
		// The same slow requests, but the window ends at 7 s: the one at 7.1 s is not its.
		{"window ends", window(0, 350, 6200*ms, 6500*ms, 6900*ms, 7100*ms, 2*time.Second), 0, 7 * time.Second, 6 * time.Second, 3, 4},
		// Spread one a second: ties go to the earliest.
		{"spread", window(0, 500, 1500*ms, 3500*ms, 5500*ms, 7500*ms), 0, 10 * time.Second, 600 * ms, 1, 4},
		// A window shorter than a second is one span, its start.
		{"short", window(10*time.Second, 25, 10300*ms), 10 * time.Second, 10500 * ms, 10 * time.Second, 1, 1},
	} {
		at, held, tail, ok := tailSecond(tc.rs, tc.from, tc.to, 100*ms)
		if !ok || at != tc.wantAt || held != tc.wantHeld || tail != tc.tail {
			t.Errorf("%s: got from %v, %d of %d (ok %v), want from %v, %d of %d", tc.name, at, held, tail, ok, tc.wantAt, tc.wantHeld, tc.tail)
		}
	}
	if _, _, _, ok := tailSecond(window(0, 10), 5*time.Second, 6*time.Second, 100*ms); ok {
		t.Error("a window with no requests gave a tail second")
	}
}

// spanFigures turns two running totals into rates over the span between them: the readings
// taken at or before its start and at or after its end.
func TestSpanFigures(t *testing.T) {
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	rs := []reading{
		{at: at(0.0), cpu: 0, hostBusy: 0, hostileCPU: 0, runqWait: 0, faults: 0, gcCycles: 3},
		{at: at(0.5), cpu: at(0.1), hostBusy: at(0.5), hostileCPU: at(0.1), runqWait: at(0.02), faults: 100, gcCycles: 3},
		{at: at(1.5), cpu: at(0.9), hostBusy: at(2.5), hostileCPU: at(0.4), runqWait: at(0.52), faults: 1100, gcCycles: 4,
			sent: sent{BodyBytes: 3 << 20, LMCacheFrames: 2000, PromptsRouted: 10}},
		{at: at(2.0), cpu: at(1.0), hostBusy: at(3.0), faults: 1200},
	}
	f, ok := spanFigures(rs, at(0.6), at(1.4)) // from the reading at 0.5 to the one at 1.5
	if !ok {
		t.Fatal("the timeline covers 0.6-1.4 s")
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	want := secondFigures{cores: 0.8, hostileCores: 0.3, othersCores: 0.9, runqMSps: 500, gcCycles: 1, faultsPerSec: 1000,
		bodyMiBps: 3, lmcachePerSec: 2000, promptsPerSec: 10}
	if !near(f.cores, want.cores) || !near(f.hostileCores, want.hostileCores) || !near(f.othersCores, want.othersCores) ||
		!near(f.runqMSps, want.runqMSps) || f.gcCycles != want.gcCycles || !near(f.faultsPerSec, want.faultsPerSec) ||
		!near(f.bodyMiBps, want.bodyMiBps) || !near(f.lmcachePerSec, want.lmcachePerSec) || !near(f.promptsPerSec, want.promptsPerSec) {
		t.Errorf("got %+v, want %+v", f, want)
	}
	if _, ok := spanFigures(rs, at(1.8), at(2.5)); ok {
		t.Error("the timeline ends at 2 s: 1.8-2.5 s is not covered")
	}
}
