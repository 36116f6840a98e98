package experiment

import (
	"math"
	"testing"
)

// A run's span runs from the first send of any row to the last end of a row that completed.
func TestSpan(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		rows []Row
		want float64
	}{
		{"one row", []Row{{SendAt: 1, E2E: 2}}, 2},
		{"the last end is not the last send's", []Row{{SendAt: 0, E2E: 5}, {SendAt: 1, E2E: 1}}, 5},
		{"a failed first send still opens it", []Row{{SendAt: 0, E2E: nan}, {SendAt: 2, E2E: 1}}, 3},
		{"a failed row does not end it", []Row{{SendAt: 0, E2E: 1}, {SendAt: 0.5, E2E: nan}}, 1},
		{"no row completed", []Row{{SendAt: 0, E2E: nan}}, 0},
		{"no rows", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Span(tt.rows); got != tt.want {
				t.Errorf("Span = %v, want %v", got, tt.want)
			}
		})
	}
}
