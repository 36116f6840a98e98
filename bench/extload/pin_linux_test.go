//go:build linux

package extload

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPUs is the affinity of every thread of this process, by thread id.
func threadCPUs(t *testing.T) map[int]int {
	t.Helper()
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, tid := range tids {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // ended meanwhile
		}
		out[tid] = set.Count()
	}
	return out
}

func TestPinMovesEveryThreadAndRestores(t *testing.T) {
	cpus, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skipf("needs 2 CPUs to see a pin; this process may use %v", cpus)
	}
	// Threads besides the test's own: goroutines locked to their threads while Pin runs.
	var ready, release sync.WaitGroup
	release.Add(1)
	for range 4 {
		ready.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			release.Wait()
		}()
	}
	ready.Wait()
	defer release.Done()

	restore, err := Pin(cpus[len(cpus)-1:])
	if err != nil {
		t.Fatal(err)
	}
	for tid, n := range threadCPUs(t) {
		if n != 1 {
			t.Errorf("thread %d may run on %d CPUs after Pin, want 1", tid, n)
		}
	}
	// A thread started after the pin inherits it.
	started, stop := make(chan int), make(chan struct{})
	for range 4 { // more locked threads than were idle: the runtime must start new ones
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- unix.Gettid()
			<-stop
		}()
	}
	for range 4 {
		tid := <-started
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil || set.Count() != 1 || !set.IsSet(cpus[len(cpus)-1]) {
			t.Errorf("thread %d, locked after Pin, may run on %d CPUs (%v), want only CPU %d", tid, set.Count(), err, cpus[len(cpus)-1])
		}
	}
	close(stop)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	got, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, cpus) {
		t.Errorf("after restore this thread may run on %v, want %v", got, cpus)
	}
	for tid, n := range threadCPUs(t) {
		if n != len(cpus) {
			t.Errorf("thread %d may run on %d CPUs after restore, want %d", tid, n, len(cpus))
		}
	}
}

func TestPinRefusesNoCPU(t *testing.T) {
	tests := []struct {
		name    string
		cpus    []int
		wantErr string
	}{
		{"no CPU", nil, "pin to no CPU"},
		{"a CPU the machine lacks", []int{1000}, "none of them is a CPU this machine has online"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Pin(tt.cpus); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Pin(%v) = %v, want an error saying %q", tt.cpus, err, tt.wantErr)
			}
		})
	}
}
