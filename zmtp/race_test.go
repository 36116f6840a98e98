//go:build race

package zmtp

// raceEnabled: the race detector makes sync.Pool drop some of what is put in it.
const raceEnabled = true
