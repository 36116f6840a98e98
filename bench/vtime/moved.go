package vtime

import "github.com/loadaware/loadaware-epp/bench/experiment"

// These names moved to bench/experiment (decision 1510). They stay here, as
// aliases, only while cmd/loadaware-bench/livedemo.go and bench/live/engine.go
// still use them; new code uses the experiment names.

// SweepConfig is experiment.Config.
type SweepConfig = experiment.Config

// DefaultSweepConfig is experiment.DefaultConfig.
func DefaultSweepConfig() experiment.Config { return experiment.DefaultConfig() }

// EnvoyRouter is experiment.EnvoyRouter.
func EnvoyRouter() experiment.Router { return experiment.EnvoyRouter() }

// ProtocolPerSeed is experiment.ProtocolPerSeed; Location is experiment.Location.
const (
	ProtocolPerSeed = experiment.ProtocolPerSeed
	Location        = experiment.Location
)
