package gctune

import (
	"runtime"
	"runtime/metrics"
	"time"
)

// A pre-touched heap collects at its memory limit only (GOGC off), and the first of those
// collections starts with no runway. The Go pacer starts a cycle a runway under its goal, for
// what is allocated while the cycle marks, and sizes that runway from the last cycle's scan
// work. The last cycle was the pre-touch's, which scanned almost nothing, so the trigger sits
// at its ceiling, 4 MiB under the goal, and the mark of the live heap runs with the heap at its
// goal: the goroutines that allocate meanwhile assist or wait (decision 1187). Later cycles
// have a real last cycle and set their own runway.
//
// So Apply, given Settings.Runway, watches the heap until its first collection and starts that
// one itself once the heap is within the runway of the goal. It gives the runway (the soak's
// first collection started 45-55 MB under its goal instead of 1-4), but on a busy host it was
// not shown to cost the steady traffic less, so no plan sets it yet (decision 1188).

// FirstCollectionRunway is the candidate's runway: about a second of the heap's growth under
// the soak's five hostile clients (50-60 MB/s), against the 4 MiB the pacer leaves it.
const FirstCollectionRunway = 64 << 20

// runwayEvery is how often the watch reads the heap: 3 MB of that growth between readings.
const runwayEvery = 50 * time.Millisecond

// heapState is what the watch reads of the runtime.
type heapState struct {
	objects uint64 // /memory/classes/heap/objects:bytes: the heap's objects, live or not yet swept
	goal    uint64 // /gc/heap/goal:bytes: where the collector wants the next cycle to end
	cycles  uint64 // /gc/cycles/total:gc-cycles: collections completed
}

// collectDue reports whether h's heap is within runway bytes of its goal.
func collectDue(h heapState, runway uint64) bool {
	return h.goal > 0 && h.objects+runway >= h.goal
}

// watchFirstCollection reads the heap each time wait returns true, until a collection
// completes (the cycle count moves past the first reading's: the runtime collected first, and
// its pacer now has a real last cycle) or the heap is within runway of its goal, when it calls
// collect, once, and returns true. It returns false when wait does, or when a collection came
// first.
func watchFirstCollection(read func() heapState, collect func(), wait func() bool, runway uint64) bool {
	first := read()
	for wait() {
		h := read()
		if h.cycles != first.cycles {
			return false
		}
		if collectDue(h, runway) {
			collect()
			return true
		}
	}
	return false
}

var heapNames = []string{"/memory/classes/heap/objects:bytes", "/gc/heap/goal:bytes", "/gc/cycles/total:gc-cycles"}

// readHeap reads heapState from runtime/metrics.
func readHeap() heapState {
	s := make([]metrics.Sample, len(heapNames))
	for i, n := range heapNames {
		s[i].Name = n
	}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return heapState{objects: v[0], goal: v[1], cycles: v[2]}
}

// startFirstCollectionWatch runs watchFirstCollection on the runtime with runway, every
// runwayEvery, in a goroutine of its own that ends with the watch.
func startFirstCollectionWatch(runway uint64) {
	go func() {
		tick := time.NewTicker(runwayEvery)
		defer tick.Stop()
		watchFirstCollection(readHeap, runtime.GC, func() bool { <-tick.C; return true }, runway)
	}()
}
