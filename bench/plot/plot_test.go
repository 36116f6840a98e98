package plot

import (
	"bytes"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestFiguresAreDeterministicPNGs(t *testing.T) {
	dir := t.TempDir()
	ax := Axes{Title: "t", X: "x", Y: "y"}
	two := []Series{
		{Name: "a", X: []float64{0, 0.5, 1, 2}, Y: []float64{2.4, 1.3, 1.2, 1.1}},
		{Name: "b", X: []float64{0, 1, 2, 3}, Y: []float64{0.3, 0.2, math.NaN(), 0.25}, Dashed: true},
	}
	tests := []struct {
		name string
		draw func(string) error
	}{
		{"ecdf", func(p string) error {
			return ECDF(p, Axes{Title: "TTFT", X: "s", Y: "fraction", LogX: true}, []Series{{Name: "a", Y: []float64{0.1, 0.2, 0.2, 5, math.NaN(), 0}}, {Name: "empty"}})
		}},
		{"lines", func(p string) error { return Lines(p, ax, two) }},
		{"steps", func(p string) error { return Steps(p, Axes{Title: "t", YMin: 0, YMax: 10}, two) }},
		{"paired", func(p string) error { return Paired(p, ax, two) }},
		{"heatmap", func(p string) error {
			return Heatmap(p, "t", Grid{Rows: []string{"a", "b"}, Cols: []string{"x", "y", "z"},
				Values: [][]float64{{1, 2, math.NaN()}, {5, 1, 1.5}}, Labels: [][]string{{"1.00", "2.00", ""}, {"5.00", "1.00", "1.50"}}, Min: 1, Max: 3})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := filepath.Join(dir, tt.name+"-a.png"), filepath.Join(dir, tt.name+"-b.png")
			for _, p := range []string{a, b} {
				if err := tt.draw(p); err != nil {
					t.Fatal(err)
				}
			}
			da, err := os.ReadFile(a)
			if err != nil {
				t.Fatal(err)
			}
			db, _ := os.ReadFile(b)
			if !bytes.Equal(da, db) {
				t.Fatal("the same figure drawn twice differs")
			}
			img, err := png.Decode(bytes.NewReader(da))
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if img.Bounds().Dx() < 400 || img.Bounds().Dy() < 200 {
				t.Fatalf("figure is %v, too small", img.Bounds())
			}
		})
	}
}

func TestRejectsBadSeries(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		s    Series
		is   error
	}{
		{"mismatched lengths", Series{Name: "x", X: []float64{1}, Y: []float64{1, 2}}, nil},
		{"no finite point", Series{Name: "nan", X: []float64{math.NaN()}, Y: []float64{1}}, ErrNoData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Lines(filepath.Join(dir, "x.png"), Axes{}, []Series{tt.s})
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
		})
	}
	if err := Lines(filepath.Join(dir, "missing", "x.png"), Axes{}, []Series{{Name: "a", X: []float64{1}, Y: []float64{1}}}); err == nil {
		t.Fatal("writing into a missing directory: want an error")
	}
}

func TestHeatmapRejectsMisshapenGrids(t *testing.T) {
	ok := Grid{Rows: []string{"a"}, Cols: []string{"x", "y"}, Values: [][]float64{{1, 2}}, Labels: [][]string{{"", ""}}, Min: 1, Max: 2}
	tests := []struct {
		name string
		edit func(*Grid)
	}{
		{"no rows", func(g *Grid) { g.Rows, g.Values, g.Labels = nil, nil, nil }},
		{"a row too short", func(g *Grid) { g.Values = [][]float64{{1}} }},
		{"labels missing", func(g *Grid) { g.Labels = nil }},
		{"empty range", func(g *Grid) { g.Max = g.Min }},
	}
	if err := Heatmap(filepath.Join(t.TempDir(), "ok.png"), "ok", ok); err != nil {
		t.Fatalf("a good grid: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := ok
			tt.edit(&g)
			if err := Heatmap(filepath.Join(t.TempDir(), "bad.png"), "bad", g); err == nil {
				t.Fatal("drew a misshapen grid")
			}
		})
	}
}
