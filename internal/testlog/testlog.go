// Package testlog is a log sink for tests: a buffer the code under test may write from any
// goroutine while the test reads it, and waits for a line to appear in it.
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. The zero value is ready to use.
type Buffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	waits []wait // strings not seen yet
}

type wait struct {
	want string
	seen chan struct{}
}

// Write appends p, and closes the channel of every Seen whose string the buffer now holds.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.b.Write(p)
	left := b.waits[:0]
	for _, w := range b.waits {
		if strings.Contains(b.b.String(), w.want) {
			close(w.seen)
		} else {
			left = append(left, w)
		}
	}
	b.waits = left
	return n, err
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Seen returns a channel closed once the buffer holds want: at once if it already does,
// else at the Write that completes it.
func (b *Buffer) Seen(want string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := make(chan struct{})
	if strings.Contains(b.b.String(), want) {
		close(seen)
		return seen
	}
	b.waits = append(b.waits, wait{want: want, seen: seen})
	return seen
}
