// Package progress shows a long run's progress on a writer (the commands' stderr): a bar
// redrawn in place on a terminal, a line at every quarter otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Bar shows done/total on w: a bar redrawn in place on a terminal (at most every 100 ms,
// and at the end), a line at every quarter otherwise, nothing when hidden. It is safe for
// concurrent use; Finish ends the bar's line.
type Bar struct {
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

// New returns a bar labelled label on w; with show false it prints nothing.
func New(w io.Writer, label string, show bool) *Bar {
	return &Bar{w: w, label: label, show: show, tty: terminal(w), start: time.Now()}
}

// Update records that done of total are finished.
func (p *Bar) Update(done, total int) { p.UpdateFailed(done, total, 0) }

// UpdateFailed records that done of total are finished, failed of them failed (said when
// there are any).
func (p *Bar) UpdateFailed(done, total, failed int) {
	if !p.show || total <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fails := ""
	if failed > 0 {
		fails = fmt.Sprintf(", %d failed", failed)
	}
	if p.tty {
		if now := time.Now(); done == total || now.Sub(p.last) >= 100*time.Millisecond {
			p.last = now
			const width = 30
			filled := min(max(done, 0), total) * width / total
			fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d%s %.0fs", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total, fails, time.Since(p.start).Seconds())
			p.drawn = true
		}
		return
	}
	if q := done * 4 / total; q > p.quarter {
		p.quarter = q
		fmt.Fprintf(p.w, "%s: %d/%d%s (%.0fs)\n", p.label, done, total, fails, time.Since(p.start).Seconds())
	}
}

// Finish ends the bar's line on a terminal.
func (p *Bar) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// terminal reports whether w is a terminal.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
