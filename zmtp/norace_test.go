//go:build !race

package zmtp

const raceEnabled = false
