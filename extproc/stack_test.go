package extproc

import (
	"runtime"
	"sync"
	"testing"
)

// TestGrowStackReserves: a goroutine that has called growStack holds a stack of at least
// stackReserve more than a new goroutine's, although growStack writes none of it (its
// reserve is a local of a branch never taken; the compiler must still keep it in the frame).
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
	if grown < plain+stackReserve {
		t.Errorf("a goroutine's stack after growStack: %d bytes, want at least %d more than without (%d)", grown, stackReserve, plain)
	}
}
