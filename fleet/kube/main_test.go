package kube

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a Watcher leaves goroutines behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
