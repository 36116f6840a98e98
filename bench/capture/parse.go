package capture

import (
	"os"
	"path/filepath"
)

// ParseQueryRange parses the body of a Prometheus /api/v1/query_range answer
// and returns its engine series (see Series), sorted by instance; name is
// used in errors. It refuses what Load refuses in a prom/ file.
func ParseQueryRange(data []byte, name string) ([]Series, error) {
	return parseProm(data, name)
}

// IsCapture reports whether dir is a capture in the published layout: a cell
// directory (it holds run.json) or a directory holding one or more.
func IsCapture(dir string) bool {
	if isCellDir(dir) {
		return true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() && isCellDir(filepath.Join(dir, e.Name())) {
			return true
		}
	}
	return false
}
