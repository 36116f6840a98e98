package progress

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// Off a terminal the bar prints a line at each quarter passed, with the failures when there
// are any, and nothing when hidden or when total is not positive.
func TestBarPrintsQuarters(t *testing.T) {
	tests := []struct {
		name   string
		show   bool
		total  int
		failed int
		want   []string
	}{
		{"quarters", true, 8, 0, []string{"run: 2/8 (", "run: 4/8 (", "run: 6/8 (", "run: 8/8 ("}},
		{"failures said", true, 4, 1, []string{"run: 1/4, 1 failed (", "run: 2/4, 1 failed (", "run: 3/4, 1 failed (", "run: 4/4, 1 failed ("}},
		{"hidden", false, 8, 0, nil},
		{"no total", true, 0, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			b := New(&buf, "run", tc.show)
			for done := 1; done <= max(tc.total, 3); done++ {
				b.UpdateFailed(done, tc.total, tc.failed)
			}
			b.Finish()
			var lines []string
			if s := strings.TrimSuffix(buf.String(), "\n"); s != "" {
				lines = strings.Split(s, "\n")
			}
			if len(lines) != len(tc.want) {
				t.Fatalf("printed %q, want %d lines", buf.String(), len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d = %q, want it to start %q", i+1, lines[i], w)
				}
			}
		})
	}
}

// Concurrent updates print every quarter once (run under -race).
func TestBarIsSafeForConcurrentUse(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "run", true)
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			done++
			d := done
			mu.Unlock()
			b.Update(d, 100)
		}()
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "\n"); n < 1 || n > 4 {
		t.Errorf("printed %d lines for 100 updates, want 1 to 4:\n%s", n, buf.String())
	}
}
