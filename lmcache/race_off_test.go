//go:build !race

package lmcache

// raceEnabled reports a -race build, whose instrumentation changes what allocates: the
// allocation-count tests skip under it.
const raceEnabled = false
