package live

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every engine's driver, pusher and
// server, the picker, the gateway and every request stop when a run ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
