package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// The first collection of a pre-touched heap starts once the heap is within the runway of
// its goal, once; a collection the runtime completes first ends the watch without one.
func TestWatchFirstCollection(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		readings  []heapState // the first is read before any wait
		collected bool
		reads     int // readings taken
	}{
		{"growing heap: starts at the first reading within the runway", []heapState{
			{objects: 100 * mib, goal: 870 * mib, cycles: 1}, {objects: 700 * mib, goal: 870 * mib, cycles: 1},
			{objects: 805 * mib, goal: 870 * mib, cycles: 1}, {objects: 806 * mib, goal: 870 * mib, cycles: 1},
			{objects: 860 * mib, goal: 870 * mib, cycles: 1}}, true, 4},
		{"the runtime collected first", []heapState{
			{objects: 100 * mib, goal: 870 * mib, cycles: 1}, {objects: 700 * mib, goal: 870 * mib, cycles: 1},
			{objects: 120 * mib, goal: 870 * mib, cycles: 2}, {objects: 860 * mib, goal: 870 * mib, cycles: 2}}, false, 3},
		{"the heap never nears its goal", []heapState{
			{objects: 100 * mib, goal: 870 * mib, cycles: 1}, {objects: 300 * mib, goal: 870 * mib, cycles: 1},
			{objects: 805 * mib, goal: 870 * mib, cycles: 1}}, false, 3},
		{"no goal read", []heapState{{cycles: 1}, {objects: 900 * mib, cycles: 1}}, false, 2},
	} {
		reads, collects := 0, 0
		read := func() heapState { reads++; return tc.readings[reads-1] }
		wait := func() bool { return reads < len(tc.readings) }
		got := watchFirstCollection(read, func() { collects++ }, wait, 64*mib)
		if got != tc.collected || collects != map[bool]int{true: 1, false: 0}[tc.collected] || reads != tc.reads {
			t.Errorf("%s: returned %v after %d readings and %d collections; want %v after %d readings",
				tc.name, got, reads, collects, tc.collected, tc.reads)
		}
	}
}

// On the runtime: a heap collected at its limit only has its first collection started the
// runway under the goal, before the runtime's own (4 MiB under it). The heap grows 1 MiB
// between readings.
func TestFirstCollectionWatchOnTheRuntime(t *testing.T) {
	gogc, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		sink = nil
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
	runtime.GC()
	const runway = 16 << 20
	debug.SetMemoryLimit(int64(readHeap().objects) + 96<<20)
	var at heapState
	grow := func() bool { sink = append(sink, make([]byte, 1<<20)); return len(sink) < 1024 }
	if !watchFirstCollection(readHeap, func() { at = readHeap(); runtime.GC() }, grow, runway) {
		t.Fatalf("the runtime collected before the watch, or 1 GiB went by (%d MiB grown)", len(sink))
	}
	if at.objects+runway < at.goal || at.objects > at.goal {
		t.Errorf("the watch collected at %d MiB of a %d MiB goal, want within %d MiB under it", at.objects>>20, at.goal>>20, runway>>20)
	}
	if at.goal-at.objects < 8<<20 {
		t.Errorf("the watch collected %d MiB under the goal: no more runway than the runtime's own", (at.goal-at.objects)>>20)
	}
}

// sink keeps the test's allocations on the heap.
var sink [][]byte
