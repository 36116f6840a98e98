package capture

// ParseQueryRange parses the body of a Prometheus /api/v1/query_range answer
// and returns its engine series (see Series), sorted by instance; name is
// used in errors. It refuses what Load refuses in a prom/ file.
func ParseQueryRange(data []byte, name string) ([]Series, error) {
	return parseProm(data, name)
}
