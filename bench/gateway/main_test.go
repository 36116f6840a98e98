package gateway_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every ext_proc stream the gateway
// opens must end (drained or cancelled).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
