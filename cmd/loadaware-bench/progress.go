package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressBar shows done/total on w: a bar redrawn in place on a terminal (at most every
// 100 ms), a line at every quarter otherwise, nothing when hidden. It is safe for concurrent
// use; finish ends the bar's line.
type progressBar struct {
	w       io.Writer
	label   string
	show    bool
	tty     bool
	start   time.Time
	mu      sync.Mutex
	last    time.Time
	quarter int
	drawn   bool
}

func newProgressBar(w io.Writer, label string, show bool) *progressBar {
	return &progressBar{w: w, label: label, show: show, tty: ttyWriter(w), start: time.Now()}
}

// update records that done of total are finished.
func (p *progressBar) update(done, total int) {
	if !p.show || total <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		if now := time.Now(); done == total || now.Sub(p.last) >= 100*time.Millisecond {
			p.last = now
			const width = 30
			filled := done * width / total
			fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d %.0fs", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total, time.Since(p.start).Seconds())
			p.drawn = true
		}
		return
	}
	if q := done * 4 / total; q > p.quarter {
		p.quarter = q
		fmt.Fprintf(p.w, "%s: %d/%d (%.0fs)\n", p.label, done, total, time.Since(p.start).Seconds())
	}
}

// finish ends the bar's line on a terminal.
func (p *progressBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// ttyWriter reports whether w is a terminal.
func ttyWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
