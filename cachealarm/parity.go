package cachealarm

import "fmt"

// Compare is the parity sample of the picker's ids against an engine's for one prompt:
// OK when they are equal, else the first position where they differ.
func Compare(what string, picker, engine []uint32) Sample {
	n := min(len(picker), len(engine))
	for i := range n {
		if picker[i] != engine[i] {
			return Sample{Detail: fmt.Sprintf("%s: token %d is %d for the picker, %d for the engine (%d and %d tokens)",
				what, i, picker[i], engine[i], len(picker), len(engine))}
		}
	}
	if len(picker) != len(engine) {
		return Sample{Detail: fmt.Sprintf("%s: the picker has %d tokens, the engine %d (equal up to %d)", what, len(picker), len(engine), n)}
	}
	return Sample{OK: true}
}
