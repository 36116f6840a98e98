package tokenize

import "runtime"

// yielder lets one long encoding give up the processor about every millisecond of work, when
// the process has only one processor (GOMAXPROCS 1: a pod with a CPU limit of one core).
// A worst-shape prompt takes tens of milliseconds to encode, and the scheduler preempts a
// running goroutine only every 10 ms or so. With one processor, everything else waits
// that long at each step, and a request takes a dozen steps (decision 0709). With more
// processors it does nothing: the others run the rest, and yielding there cost a third
// more CPU for no gain (0709).
//
// Work is counted in units of about 70 ns of encoding (one candidate popped in the heap
// merge; TestEncodingYieldsOnlyWithOneProcessor logs the yields' spacing). The zero value never yields.
type yielder struct {
	on     bool
	work   int
	yields int // how many times it yielded since start
}

// yieldWork is the work between yields: about 1 ms.
const yieldWork = 1 << 14

// start readies y for one encoding. GOMAXPROCS is read each time: the runtime changes it
// when the container's CPU limit changes.
func (y *yielder) start() { y.on, y.work, y.yields = runtime.GOMAXPROCS(0) == 1, 0, 0 }

// did counts units of work done, and yields once a millisecond's worth has piled up. It
// inlines to a test of on, so that encoding with many processors pays no call.
func (y *yielder) did(units int) {
	if y != nil && y.on {
		y.count(units)
	}
}

func (y *yielder) count(units int) {
	if y.work += units; y.work >= yieldWork {
		y.work = 0
		y.yields++
		runtime.Gosched()
	}
}

// pieceWork is the units of encoding one piece of n bytes outside the heap merge (which
// counts its own): the small merge loop is quadratic in the piece's length. A run of
// 127 spaces costs it about 8.6 µs.
func pieceWork(n int) int { return 1 + n*n/128 }
