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
	return writeFiles(res, out, jsonOut, command, func(fig string) error {
		return plot.Heatmap(fig, fmt.Sprintf("TTFT p95 relative to the profile's best (colour saturates at %gx)", FigureMax), Summarize(res).Figure())
	}, func(w io.Writer, opt ReportOptions) error { return WriteMarkdown(w, res, opt) })
}

// writeFiles creates out's directory, draws the figure beside out (same name,
// .png; a figure without data is left out), writes res as JSON to jsonOut
// when it is set, and last the report that md writes to out, given the files
// it may link to.
func writeFiles(res Result, out, jsonOut, command string, draw func(fig string) error, md func(io.Writer, ReportOptions) error) error {
	if err := experiment.MkdirFor(out); err != nil {
		return err
	}
	fig := strings.TrimSuffix(out, filepath.Ext(out)) + ".png"
	opt := ReportOptions{Command: command}
	switch err := draw(fig); {
	case err == nil:
		opt.Figure = relTo(out, fig)
	case !errors.Is(err, plot.ErrNoData):
		return err
	}
	if jsonOut != "" {
		if err := experiment.WriteFile(jsonOut, func(w io.Writer) error { return WriteJSON(w, res) }); err != nil {
			return err
		}
		opt.JSON = relTo(out, jsonOut)
	}
	return experiment.WriteFile(out, func(w io.Writer) error { return md(w, opt) })
}

// relTo returns path relative to the directory of file, or path itself when it has none.
func relTo(file, path string) string {
	rel, err := filepath.Rel(filepath.Dir(file), path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}
