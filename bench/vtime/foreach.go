package vtime

import (
	"context"
	"runtime"
	"sync"
)

// ForEach runs job(0) ... job(n-1) on workers goroutines (0 or less: GOMAXPROCS),
// handing out indexes in order. It stops handing them out when ctx is cancelled and then
// returns ctx's error; otherwise it returns the error of the lowest index that failed, or
// nil. Jobs must write their results to places of their own (by index).
func ForEach(ctx context.Context, n, workers int, job func(i int) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	errs := make([]error, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				errs[i] = job(i)
			}
		})
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
