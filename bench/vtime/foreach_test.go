package vtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestForEach(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	tests := []struct {
		name    string
		n       int
		workers int
		fail    map[int]error
		want    error
	}{
		{"every index once, no error", 50, 3, nil, nil},
		{"the lowest failing index's error wins", 20, 4, map[int]error{13: errB, 7: errA}, errA},
		{"no jobs", 0, 2, nil, nil},
		{"workers <= 0 means GOMAXPROCS", 10, 0, map[int]error{9: errB}, errB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := make([]atomic.Int32, tt.n)
			err := ForEach(context.Background(), tt.n, tt.workers, func(i int) error {
				seen[i].Add(1)
				return tt.fail[i]
			})
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			for i := range seen {
				if seen[i].Load() != 1 {
					t.Fatalf("job %d ran %d times, want once", i, seen[i].Load())
				}
			}
		})
	}
}

func TestForEachStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Int32
	err := ForEach(ctx, 1000, 1, func(i int) error {
		if ran.Add(1) == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := ran.Load(); n >= 1000 {
		t.Fatalf("%d jobs ran after the cancel at the third: feeding must stop", n)
	}
}
