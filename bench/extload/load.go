package extload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// WindowConfig is one open-loop window.
type WindowConfig struct {
	Rate     float64       // mean arrivals per second (Poisson)
	Duration time.Duration // arrivals are scheduled over this long
	Seed     uint64        // arrival times
	// MaxInFlight bounds the streams open at once; an arrival beyond it is not sent and is
	// counted in Window.Shed (an overloaded server then shows as shed load, not as an
	// unbounded pile of goroutines).
	MaxInFlight int
	// Timeout bounds one stream.
	Timeout time.Duration
	// Progress, when set, is called with the arrivals scheduled so far and the expected
	// total, at most about ten times a second, from the sending goroutine.
	Progress func(sent, expected int)
}

// Window is what one window measured.
type Window struct {
	Sent    int // streams opened
	Shed    int // arrivals not sent: MaxInFlight streams were open
	Failed  int
	Routed  int // streams whose server named a destination
	Elapsed time.Duration
	Totals  []time.Duration // full stream round trips of the streams that succeeded
	Choices []time.Duration // their request phases (Result.Decision)
	Errors  map[string]int  // failures by message (at most 8 distinct kept)
}

// Run sends req to c at cfg.Rate for cfg.Duration and waits for every stream it opened.
// It stops scheduling early when ctx ends (the window is then partial).
func Run(ctx context.Context, c extprocv3.ExternalProcessorClient, req Request, cfg WindowConfig) (Window, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.MaxInFlight <= 0 || cfg.Timeout <= 0 {
		return Window{}, fmt.Errorf("extload: rate, duration, max in-flight and timeout must be positive (got %v, %v, %d, %v)",
			cfg.Rate, cfg.Duration, cfg.MaxInFlight, cfg.Timeout)
	}
	w := Window{Errors: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, cfg.MaxInFlight)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	expected := int(cfg.Rate * cfg.Duration.Seconds())
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	start := time.Now()
	lastProgress := start
	for at := time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)); at < cfg.Duration; at += time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)) {
		due := start.Add(at)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			w.Shed++
			continue
		}
		w.Sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			res, err := Exchange(sctx, c, req, due)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				w.Failed++
				if _, ok := w.Errors[err.Error()]; ok || len(w.Errors) < 8 {
					w.Errors[err.Error()]++
				}
				return
			}
			if res.Routed {
				w.Routed++
			}
			w.Totals = append(w.Totals, res.Total)
			w.Choices = append(w.Choices, res.Decision)
		}()
		if cfg.Progress != nil && time.Since(lastProgress) >= 100*time.Millisecond {
			lastProgress = time.Now()
			cfg.Progress(w.Sent+w.Shed, expected)
		}
	}
	wg.Wait()
	w.Elapsed = time.Since(start)
	if cfg.Progress != nil {
		cfg.Progress(w.Sent+w.Shed, max(expected, w.Sent+w.Shed))
	}
	return w, ctx.Err()
}
