//go:build race

package trace

// raceEnabled reports a -race build, where the whole-trace cross-check runs
// ten times slower and is cut to a prefix of the trace.
const raceEnabled = true
