package ratelog

import (
	"fmt"
	"testing"
	"time"
)

func TestDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := New(10 * time.Second)
	for _, step := range []struct {
		key string
		at  time.Duration
		n   int
		due bool
	}{
		{"a", 0, 1, true},               // the first of a key
		{"a", time.Second, 0, false},    // within the period: counted
		{"b", 2 * time.Second, 1, true}, // keys are apart
		{"a", 9 * time.Second, 0, false},
		{"a", 10 * time.Second, 3, true}, // a period on: this one and the two held back
		{"a", 11 * time.Second, 0, false},
	} {
		if n, due := l.Due(step.key, t0.Add(step.at)); n != step.n || due != step.due {
			t.Fatalf("Due(%s, +%v) = %d, %v; want %d, %v", step.key, step.at, n, due, step.n, step.due)
		}
	}
	for i := range maxKeys { // a flood of keys: past maxKeys all are forgotten
		l.Due(fmt.Sprint(i), t0)
	}
	if n, due := l.Due("a", t0.Add(12*time.Second)); !due || n != 1 {
		t.Fatalf("after %d other keys, Due(a) = %d, %v; want 1, true (forgotten, so due again)", maxKeys, n, due)
	}
}
