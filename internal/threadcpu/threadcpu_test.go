package threadcpu

import (
	"runtime"
	"testing"
	"time"
)

// TestNowCountsTheThreadsWork checks that the reading advances while the locked thread
// works, never goes back, and does not advance with the wall clock while the thread sleeps:
// what tells a thread CPU clock from a wall clock. It asks nothing of the scheduler, so a
// loaded machine only makes it slower.
func TestNowCountsTheThreadsWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := Now()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("Now() = false on linux: CLOCK_THREAD_CPUTIME_ID should be readable")
		}
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	const work = 5 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	prev, x := c0, 0
	for prev-c0 < work {
		x++
		c, _ := Now()
		if c < prev {
			t.Fatalf("thread CPU went back: %v then %v", prev, c)
		}
		prev = c
		if time.Now().After(deadline) {
			t.Fatalf("30 s of busy loop (%d turns) advanced the thread CPU by %v; want %v", x, prev-c0, work)
		}
	}

	const nap = 100 * time.Millisecond
	before, _ := Now()
	start := time.Now()
	time.Sleep(nap)
	slept := time.Since(start)
	after, _ := Now()
	if after < before {
		t.Fatalf("thread CPU went back across a sleep: %v then %v", before, after)
	}
	if d := after - before; d > nap/2 {
		t.Fatalf("a %v sleep advanced the thread CPU by %v: the clock reads wall time, not the thread's work", slept, d)
	}
}

// TestSpinUsesWhatItIsAsked checks that Spin returns once its thread has used the CPU asked
// and not long before, where the clock can be read.
func TestSpinUsesWhatItIsAsked(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := Now()
	if !ok {
		if Spin(time.Millisecond) {
			t.Fatal("Spin = true without a thread CPU clock")
		}
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	const want = 3 * time.Millisecond
	if !Spin(want) {
		t.Fatal("Spin = false with a readable thread CPU clock")
	}
	if c, _ := Now(); c-c0 < want {
		t.Fatalf("Spin(%v) returned after %v of thread CPU", want, c-c0)
	}
}

// TestOfCountsTheThreadsWorkNotItsWaits checks that Of reports at least the CPU f's thread
// used, and far less than the wall clock f spent asleep.
func TestOfCountsTheThreadsWorkNotItsWaits(t *testing.T) {
	if _, ok := Now(); !ok {
		if d, ok := Of(func() {}); ok || d != 0 {
			t.Fatalf("Of = %v, %v without a thread CPU clock; want 0, false", d, ok)
		}
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	const work = 3 * time.Millisecond
	if d, ok := Of(func() { Spin(work) }); !ok || d < work {
		t.Fatalf("Of(Spin(%v)) = %v, %v; want at least %v, true", work, d, ok, work)
	}
	const nap = 100 * time.Millisecond
	if d, ok := Of(func() { time.Sleep(nap) }); !ok || d >= nap/2 {
		t.Fatalf("Of(Sleep(%v)) = %v, %v; want well under the nap (a wait is not the thread's work)", nap, d, ok)
	}
}
