//go:build race

package picker

// raceEnabled reports a -race build, where sync.Pool drops entries at random and
// allocation counts mean nothing.
const raceEnabled = true
