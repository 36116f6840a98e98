//go:build !race

package extproc

// raceEnabled reports a -race build, where sync.Pool drops entries at random.
const raceEnabled = false
