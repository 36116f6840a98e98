package kvindex

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// rwspin is the index's readers-writer lock. Writers hold it; lookups take no lock
// (docs/decisions/0805), and its readers are a writer warming its next hold, Blocks, and
// a lookup that asks again under it. Its waiters spin, then yield the processor, instead
// of parking: a reader waits for at most one writer's hold (lockSpan blocks, about a
// microsecond), and a parked goroutine takes longer than that to be woken. Waiting
// readers go in before the next writer (writers apply long events in holds of lockSpan
// blocks, and would otherwise take the lock back at once). See docs/decisions/0804.
type rwspin struct {
	wmu     sync.Mutex   // serializes writers (they may park)
	writer  atomic.Bool  // a writer holds the lock or is taking it
	readers atomic.Int32 // readers inside, or about to check writer
	waiting atomic.Int32 // readers waiting for a writer
}

func (l *rwspin) tryRLock() bool {
	if l.writer.Load() {
		return false
	}
	l.readers.Add(1)
	if !l.writer.Load() {
		return true
	}
	l.readers.Add(-1)
	return false
}

func (l *rwspin) RLock() {
	if l.tryRLock() {
		return
	}
	l.waiting.Add(1)
	var w spinner
	for !l.tryRLock() {
		w.wait()
	}
	l.waiting.Add(-1)
}

func (l *rwspin) RUnlock() { l.readers.Add(-1) }

// readerGrace bounds how long a writer lets waiting readers go first (in spins).
const readerGrace = 256

func (l *rwspin) Lock() {
	l.wmu.Lock()
	var w spinner
	for l.waiting.Load() > 0 && w.n < readerGrace {
		w.wait()
	}
	l.writer.Store(true)
	for w = (spinner{}); l.readers.Load() != 0; {
		w.wait()
	}
}

func (l *rwspin) Unlock() {
	l.writer.Store(false)
	l.wmu.Unlock()
}

// spinner is one wait for the lock: spin re-reading it at first (a few thousand reads
// are some microseconds, longer than a writer's hold), then yield the processor (the
// holder may be waiting for it; at once when there is only one), then sleep briefly (a
// long hold: a whole endpoint's entries being dropped). Yielding after 64 reads
// measured the same (docs/decisions/0804); the longer spin keeps a waiter out of the
// scheduler for a whole ordinary hold.
type spinner struct {
	n         int
	yieldOnly bool
}

const spinReads = 4096

func (w *spinner) wait() {
	if w.n == 0 {
		w.yieldOnly = runtime.GOMAXPROCS(0) == 1
	}
	w.n++
	switch {
	case !w.yieldOnly && w.n < spinReads:
	case w.n < spinReads+1024:
		runtime.Gosched()
	default:
		time.Sleep(20 * time.Microsecond)
	}
}
