package vtime

import "github.com/loadaware/loadaware-epp/bench/experiment"

// These names moved to bench/experiment (decision 1510); they remain here only
// for the callers not yet moved (cmd/loadaware-bench/livedemo.go,
// bench/live/engine.go).

// SweepConfig is experiment.Config.
//
// Deprecated: use experiment.Config.
type SweepConfig = experiment.Config

// DefaultSweepConfig is experiment.DefaultConfig.
//
// Deprecated: use experiment.DefaultConfig.
func DefaultSweepConfig() experiment.Config { return experiment.DefaultConfig() }

// EnvoyRouter is experiment.EnvoyRouter.
//
// Deprecated: use experiment.EnvoyRouter.
func EnvoyRouter() experiment.Router { return experiment.EnvoyRouter() }

// Moved constants.
//
// Deprecated: use experiment.ProtocolPerSeed and experiment.Location.
const (
	ProtocolPerSeed = experiment.ProtocolPerSeed
	Location        = experiment.Location
)
