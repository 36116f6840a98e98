package main

import (
	"io"

	"github.com/loadaware/loadaware-epp/bench/progress"
)

// progressBar is a command's progress on stderr (bench/progress), hidden by its -progress=false
// or -quiet.
type progressBar struct{ *progress.Bar }

func newProgressBar(w io.Writer, label string, show bool) progressBar {
	return progressBar{progress.New(w, label, show)}
}

func (p progressBar) update(done, total int) { p.Update(done, total) }

func (p progressBar) finish() { p.Finish() }
