package vtime

import (
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
)

// register announces every engine's LMCache worker to the index, as LMCache
// 0.3.9 does at start-up (RegisterMsg on the pull channel).
func register(ix *lmcache.Index, addrs []string, at time.Time) error {
	for i, a := range addrs {
		url := fmt.Sprintf("%s:%d", fleet.IP(a), 30081)
		msg := lmcache.RegisterMsg{InstanceID: experiment.InstanceID(i), WorkerID: 0, IP: fleet.IP(a), Port: 8001, DistributedURL: &url}
		if err := ix.Apply(msg, at); err != nil {
			return fmt.Errorf("vtime: register engine %s: %w", a, err)
		}
	}
	return nil
}
