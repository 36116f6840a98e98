package tournament

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/plot"
)

// WriteFiles writes the markdown report to out, the summary figure beside it and,
// with jsonOut, the JSON results.
func WriteFiles(res Result, out, jsonOut, command string) error {
	if err := experiment.MkdirFor(out); err != nil {
		return err
	}
	fig := strings.TrimSuffix(out, filepath.Ext(out)) + ".png"
	err := plot.Heatmap(fig, fmt.Sprintf("TTFT p95 relative to the profile's best (colour saturates at %gx)", FigureMax), Summarize(res).Figure())
	if err != nil && !errors.Is(err, plot.ErrNoData) {
		return err
	}
	opt := ReportOptions{Command: command}
	if err == nil {
		opt.Figure = relTo(out, fig)
	}
	if jsonOut != "" {
		if err := experiment.WriteFile(jsonOut, func(w io.Writer) error { return WriteJSON(w, res) }); err != nil {
			return err
		}
		opt.JSON = relTo(out, jsonOut)
	}
	return experiment.WriteFile(out, func(w io.Writer) error { return WriteMarkdown(w, res, opt) })
}

// relTo returns path relative to the directory of file, or path itself when it has none.
func relTo(file, path string) string {
	rel, err := filepath.Rel(filepath.Dir(file), path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}
