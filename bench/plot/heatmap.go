package plot

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	gpalette "gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Grid is a table of values to draw as a heat map: Values[r][c] is row r's
// value in column c, Labels[r][c] the text written in that cell ("" for
// none). Colours run from Min (light) to Max (dark); values outside are
// drawn at the nearest end, NaN in grey.
type Grid struct {
	Rows, Cols []string
	Values     [][]float64
	Labels     [][]string
	Min, Max   float64
}

// Heatmap draws g as a heat map with the rows top to bottom and the columns
// left to right, each cell labelled; the figure is at least Width x Height
// and grows with the table.
func Heatmap(path, title string, g Grid) error {
	if len(g.Rows) == 0 || len(g.Cols) == 0 {
		return fmt.Errorf("%w: %q has no rows or columns", ErrNoData, title)
	}
	if len(g.Values) != len(g.Rows) || len(g.Labels) != len(g.Rows) {
		return fmt.Errorf("plot: heat map %q: %d rows named, %d of values, %d of labels", title, len(g.Rows), len(g.Values), len(g.Labels))
	}
	for r := range g.Rows {
		if len(g.Values[r]) != len(g.Cols) || len(g.Labels[r]) != len(g.Cols) {
			return fmt.Errorf("plot: heat map %q: row %q has %d values and %d labels for %d columns", title, g.Rows[r], len(g.Values[r]), len(g.Labels[r]), len(g.Cols))
		}
	}
	if !(g.Max > g.Min) {
		return fmt.Errorf("plot: heat map %q: range [%v, %v] is empty", title, g.Min, g.Max)
	}
	p := plot.New()
	p.Title.Text = title
	pal := moreland.SmoothBlueRed()
	pal.SetMin(g.Min)
	pal.SetMax(g.Max)
	hm := plotter.NewHeatMap(grid{g}, pal.Palette(64))
	hm.Min, hm.Max = g.Min, g.Max
	hm.Underflow, hm.Overflow, hm.NaN = first(hm.Palette), last(hm.Palette), color.Gray{Y: 200}
	p.Add(hm)
	var pts plotter.XYs
	var texts []string
	for r := range g.Rows {
		for c := range g.Cols {
			if g.Labels[r][c] == "" {
				continue
			}
			pts = append(pts, plotter.XY{X: float64(c), Y: float64(len(g.Rows) - 1 - r)})
			texts = append(texts, g.Labels[r][c])
		}
	}
	if len(pts) > 0 {
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: texts})
		if err != nil {
			return fmt.Errorf("plot: heat map %q: %w", title, err)
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].XAlign, labels.TextStyle[i].YAlign = -0.5, -0.5
			labels.TextStyle[i].Font.Size = vg.Points(7)
		}
		p.Add(labels)
	}
	rows := make([]string, len(g.Rows))
	for r, name := range g.Rows {
		rows[len(g.Rows)-1-r] = name
	}
	p.NominalX(g.Cols...)
	p.NominalY(rows...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -1, -0.5
	p.X.Min, p.X.Max = -0.5, float64(len(g.Cols))-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(len(g.Rows))-0.5
	w := max(Width, vg.Length(4+1.8*float64(len(g.Cols)))*vg.Centimeter)
	h := max(Height, vg.Length(3+0.7*float64(len(g.Rows)))*vg.Centimeter)
	if err := p.Save(w, h, path); err != nil {
		return fmt.Errorf("plot: write %s: %w", path, err)
	}
	return nil
}

// grid is a Grid as gonum's GridXYZ: column c, row r from the bottom.
type grid struct{ g Grid }

func (g grid) Dims() (c, r int)   { return len(g.g.Cols), len(g.g.Rows) }
func (g grid) Z(c, r int) float64 { return g.g.Values[len(g.g.Rows)-1-r][c] }
func (g grid) X(c int) float64    { return float64(c) }
func (g grid) Y(r int) float64    { return float64(r) }

func first(p gpalette.Palette) color.Color { return p.Colors()[0] }
func last(p gpalette.Palette) color.Color {
	cs := p.Colors()
	return cs[len(cs)-1]
}
