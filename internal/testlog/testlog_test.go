package testlog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestSeen(t *testing.T) {
	tests := []struct {
		name   string
		before string // written before Seen
		after  []string
		want   string
		seen   bool
	}{
		{"already written", "a started b", nil, "started", true},
		{"written after", "", []string{"x ", "started"}, "started", true},
		{"split across writes", "sta", []string{"rt", "ed"}, "started", true},
		{"never written", "start", []string{"ing"}, "started", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Buffer
			_, _ = b.Write([]byte(tc.before))
			c := b.Seen(tc.want)
			for _, s := range tc.after {
				_, _ = b.Write([]byte(s))
			}
			if got := closed(c); got != tc.seen {
				t.Fatalf("seen %v, want %v (buffer %q)", got, tc.seen, b.String())
			}
			if want := tc.before + strings.Join(tc.after, ""); b.String() != want {
				t.Fatalf("String() = %q, want %q", b.String(), want)
			}
		})
	}
}

// Writers on many goroutines lose nothing, and a waiter sees its line (go test -race).
func TestConcurrentWriters(t *testing.T) {
	var b Buffer
	c := b.Seen("line 99\n")
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = fmt.Fprintf(&b, "line %d\n", i)
		}()
	}
	wg.Wait()
	<-c
	if n := len(b.String()); n != 10*len("line 0\n")+90*len("line 10\n") {
		t.Fatalf("%d bytes written, want every line", n)
	}
}
