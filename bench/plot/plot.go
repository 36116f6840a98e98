// Package plot draws the benchmark's figures as PNG files with
// gonum.org/v1/plot: empirical CDFs, lines over x, step series over time and
// paired scatters with the y = x diagonal.
//
// It knows nothing of arms or seeds: callers pass named series of numbers.
// Output is deterministic for equal inputs. The only I/O is the file written.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Size of every figure.
const (
	Width  = 16 * vg.Centimeter
	Height = 10 * vg.Centimeter
)

// Series is a named set of points. For ECDF only Y is used. Dashed draws its
// line dashed (e.g. published values beside simulated ones).
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool
}

// Axes labels a figure.
type Axes struct {
	Title, X, Y string
	LogX        bool
	YMin, YMax  float64 // both zero: automatic
}

// palette gives each series a distinct, colour-blind-safe colour (Okabe-Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},
	color.RGBA{213, 94, 0, 255},
	color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255},
	color.RGBA{230, 159, 0, 255},
	color.RGBA{86, 180, 233, 255},
	color.RGBA{0, 0, 0, 255},
	color.RGBA{240, 228, 66, 255},
}

// Color returns the colour of series i.
func Color(i int) color.Color { return palette[i%len(palette)] }

func newPlot(ax Axes) *plot.Plot {
	p := plot.New()
	p.Title.Text = ax.Title
	p.X.Label.Text = ax.X
	p.Y.Label.Text = ax.Y
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	if ax.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if ax.YMin != 0 || ax.YMax != 0 {
		p.Y.Min, p.Y.Max = ax.YMin, ax.YMax
	}
	return p
}

// ECDF draws the empirical CDF of each series' Y values.
func ECDF(path string, ax Axes, series []Series) error {
	p := newPlot(ax)
	p.Legend.Top = false
	for i, s := range series {
		ys := finite(s.Y, ax.LogX)
		if len(ys) == 0 {
			continue
		}
		slices.Sort(ys)
		pts := make(plotter.XYs, 0, 2*len(ys))
		for j, y := range ys {
			pts = append(pts, plotter.XY{X: y, Y: float64(j) / float64(len(ys))}, plotter.XY{X: y, Y: float64(j+1) / float64(len(ys))})
		}
		if err := addLine(p, s, pts, i, plain); err != nil {
			return err
		}
	}
	return save(p, path)
}

// Lines draws each series as a line through its points, with markers.
func Lines(path string, ax Axes, series []Series) error { return drawXY(path, ax, series, withMarkers) }

// Steps draws each series as a step function over X (e.g. a gauge sampled at
// a fixed interval).
func Steps(path string, ax Axes, series []Series) error { return drawXY(path, ax, series, steps) }

func drawXY(path string, ax Axes, series []Series, kind lineKind) error {
	p := newPlot(ax)
	for i, s := range series {
		pts, err := xys(s)
		if err != nil {
			return err
		}
		if err := addLine(p, s, pts, i, kind); err != nil {
			return err
		}
	}
	return save(p, path)
}

// Paired draws one point per pair (X = baseline, Y = candidate) for each
// series, with the y = x diagonal: points below it improved.
func Paired(path string, ax Axes, series []Series) error {
	p := newPlot(ax)
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		pts, err := xys(s)
		if err != nil {
			return err
		}
		for _, pt := range pts {
			lo = math.Min(lo, math.Min(pt.X, pt.Y))
			hi = math.Max(hi, math.Max(pt.X, pt.Y))
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("plot: series %q: %w", s.Name, err)
		}
		sc.GlyphStyle.Color = Color(i)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		sc.GlyphStyle.Radius = vg.Points(3)
		p.Add(sc)
		p.Legend.Add(s.Name, sc)
	}
	if lo < hi {
		pad := (hi - lo) * 0.05
		lo, hi = lo-pad, hi+pad
		diag, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
		if err != nil {
			return err
		}
		diag.Color = color.Gray{Y: 128}
		diag.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(diag)
		p.Legend.Add("y = x (no change)", diag)
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
	}
	return save(p, path)
}

// lineKind is how addLine draws a series: a plain line, a line with a marker
// at each point, or a thinner step function.
type lineKind int

const (
	plain lineKind = iota
	withMarkers
	steps
)

func addLine(p *plot.Plot, s Series, pts plotter.XYs, i int, kind lineKind) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("plot: series %q: %w", s.Name, err)
	}
	dash := vg.Points(5)
	l.Color, l.Width = Color(i), vg.Points(1.5)
	if kind == steps {
		l.StepStyle, l.Width, dash = plotter.PostStep, vg.Points(1.2), vg.Points(4)
	}
	if s.Dashed {
		l.Dashes = []vg.Length{dash, vg.Points(2)}
	}
	p.Add(l)
	if kind != withMarkers {
		p.Legend.Add(s.Name, l)
		return nil
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.GlyphStyle.Color = Color(i)
	sc.GlyphStyle.Radius = vg.Points(2.5)
	p.Add(sc)
	p.Legend.Add(s.Name, l, sc)
	return nil
}

// ErrNoData is returned for a series without points.
var ErrNoData = errors.New("plot: series has no finite points")

func xys(s Series) (plotter.XYs, error) {
	if len(s.X) != len(s.Y) {
		return nil, fmt.Errorf("plot: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
	}
	pts := make(plotter.XYs, 0, len(s.X))
	for i := range s.X {
		if isFinite(s.X[i]) && isFinite(s.Y[i]) {
			pts = append(pts, plotter.XY{X: s.X[i], Y: s.Y[i]})
		}
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoData, s.Name)
	}
	return pts, nil
}

func finite(ys []float64, positive bool) []float64 {
	out := make([]float64, 0, len(ys))
	for _, y := range ys {
		if isFinite(y) && (!positive || y > 0) {
			out = append(out, y)
		}
	}
	return out
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func save(p *plot.Plot, path string) error {
	if err := p.Save(Width, Height, path); err != nil {
		return fmt.Errorf("plot: write %s: %w", path, err)
	}
	return nil
}
