package live

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// sumMetrics reads the Prometheus text format and returns, for every metric name, the sum
// of its samples over all label sets. Comments and blank lines are skipped; a sample line
// that cannot be read is an error naming it.
func sumMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, v, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, truncate(line, 80), err)
		}
		out[name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

// parseSample splits `name{labels} value [timestamp]` into the name and the value.
func parseSample(line string) (string, float64, error) {
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return "", 0, fmt.Errorf("no metric name followed by a value")
	}
	name, rest := line[:end], line[end:]
	if rest[0] == '{' {
		close := labelsEnd(rest)
		if close < 0 {
			return "", 0, fmt.Errorf("unterminated label set")
		}
		rest = rest[close+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return "", 0, fmt.Errorf("want a value and an optional timestamp after the name")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, fmt.Errorf("value %q is not a number", fields[0])
	}
	return name, v, nil
}

// labelsEnd returns the index of the '}' closing the label set s starts with, skipping
// quoted values (with backslash escapes); -1 when there is none.
func labelsEnd(s string) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// scrape reads url (a /metrics endpoint) and sums its samples by metric name.
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	m, err := sumMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return m, nil
}
