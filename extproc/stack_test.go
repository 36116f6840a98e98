package extproc

import (
	"runtime"
	"sync"
	"testing"
)

// TestGrowStackReserves: goroutines that have called growStack hold larger stacks than new
// ones, by about stackReserve each, although growStack writes none of it (its reserve is a
// local of a branch never taken; the compiler must still keep it in the frame). The stacks
// in use are the runtime's count for the whole process: a goroutine may take over an ended
// one's stack, so the growth per goroutine counted is held to half the reserve.
func TestGrowStackReserves(t *testing.T) {
	const n = 256
	inUse := func(grow bool) uint64 {
		var started sync.WaitGroup
		release := make(chan struct{})
		var done sync.WaitGroup
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			started.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				if grow {
					growStack()
				}
				started.Done()
				<-release
			}()
		}
		started.Wait()
		runtime.ReadMemStats(&after)
		close(release)
		done.Wait()
		return (after.StackInuse - min(after.StackInuse, before.StackInuse)) / n
	}
	plain, grown := inUse(false), inUse(true)
	t.Logf("stacks in use per goroutine: %d bytes, %d after growStack", plain, grown)
	if grown < plain+stackReserve/2 {
		t.Errorf("stacks in use per goroutine after growStack: %d bytes, want at least %d more than without (%d)", grown, stackReserve/2, plain)
	}
}
