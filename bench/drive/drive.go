// Package drive sends a workload at an OpenAI-compatible URL the way the
// published experiment did, and records it in the published layout
// (bench/capture), so `replay -real` and `compare` read a user's own cluster
// like the published one.
//
// A cell is one arm: an optional warm-up (sent, not recorded), then the seeds
// back to back, each open loop (every request sent at its SendAt, whatever the
// answers), with a gap between seeds. Each seed's file is written when the
// seed ends, and run.json lists the seeds done so far, so a cell stopped at any
// point (Ctrl-C, the time cap) is a valid capture of the seeds it finished.
//
// drive sends only to the URLs it is given: the target, the engines it
// scrapes, a Prometheus server and the picker's admin URL. The request sender
// is injected (Send), so the package tests need no engine.
package drive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// Outcome is what one request's stream gave.
type Outcome struct {
	TTFT             time.Duration // send to first token; 0 if none came
	E2E              time.Duration // send to the stream's end or failure
	ITLs             []time.Duration
	PromptTokens     int
	CompletionTokens int
	Err              error // nil: the request completed
}

// Send sends one request and waits for its whole answer; it must return by
// ctx's deadline.
type Send func(ctx context.Context, r workload.Request) Outcome

// Seed is one seed's requests.
type Seed struct {
	Seed     int
	Requests []workload.Request
}

// Cell is one arm's run.
type Cell struct {
	Dir     string             // where the cell is written
	Arm     string             // run.json arm, e.g. "loadaware"
	Beta    *float64           // run.json beta; nil for arms without one
	Rate    float64            // the workload's offered rate, requests per second
	Warmup  []workload.Request // sent before the seeds, not recorded
	Seeds   []Seed
	Extra   map[string]any // more run.json keys (target, workload, ...)
	SeedGap time.Duration  // idle time between a seed's last answer and the next seed
}

// Limits bound a drive.
type Limits struct {
	RequestTimeout time.Duration // per request; 0: 5 minutes
	MaxInFlight    int           // requests in flight at once; 0: 4,096 (open loop stalls past it, said in the progress line)
}

// Progress is told about each finished request: done of total in the cell,
// and the failures so far.
type Progress func(done, total, failed int)

// SeedSummary is what the driver itself saw of one seed, before anything was written:
// the first-token p95 of its rows and the imbalance of the engines' running counts
// over its send window, from the series it recorded (NaN without them).
type SeedSummary struct {
	Seed      int
	TTFTP95   float64 // seconds
	Imbalance float64
}

// ErrStopped is returned when ctx ended before the cell did; the capture then
// holds the seeds finished before.
var ErrStopped = errors.New("drive: stopped before the cell ended: the capture lists the seeds it finished")

// RunCell runs one cell and writes it. metrics, if not nil, is asked for the
// engine series of the cell's window when it ends (or stops) and at least
// one seed is done; without vllm_num_requests_running series the capture is
// written but Load will refuse it (imbalance needs them), which the error says.
// It returns each finished seed's summary, as the driver saw it.
func RunCell(ctx context.Context, c Cell, send Send, lim Limits, metrics func(start, end time.Time) (map[string][]capture.Series, error), progress Progress) ([]SeedSummary, error) {
	if c.Dir == "" || c.Arm == "" || !(c.Rate > 0) || len(c.Seeds) == 0 {
		return nil, errors.New("drive: a cell needs a directory, an arm, a positive rate and at least one seed")
	}
	if lim.RequestTimeout <= 0 {
		lim.RequestTimeout = 5 * time.Minute
	}
	if lim.MaxInFlight <= 0 {
		lim.MaxInFlight = 4096
	}
	total := len(c.Warmup)
	for _, s := range c.Seeds {
		total += len(s.Requests)
	}
	tally := &tally{total: total, progress: progress}
	if len(c.Warmup) > 0 {
		if _, err := runSeed(ctx, c.Warmup, send, lim, tally); err != nil {
			return nil, fmt.Errorf("drive: warm-up: %w", err)
		}
	}
	var start, end time.Time
	var done []int
	var sums []SeedSummary
	var windows [][2]float64
	stopped := false
	for i, s := range c.Seeds {
		if i > 0 && c.SeedGap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(c.SeedGap):
			}
		}
		if ctx.Err() != nil {
			stopped = true
			break
		}
		rows, err := runSeed(ctx, s.Requests, send, lim, tally)
		if errors.Is(err, errStopped) {
			stopped = true
			break
		}
		if err != nil {
			return sums, err
		}
		first, last := span(rows)
		if start.IsZero() {
			start = first
		}
		end = last
		sums = append(sums, SeedSummary{Seed: s.Seed, TTFTP95: capture.SeedMetrics(rows)[capture.TTFTP95], Imbalance: math.NaN()})
		from, to := capture.SendWindow(rows)
		windows = append(windows, [2]float64{from, to})
		if err := capture.WriteSeed(c.Dir, capture.Seed{Seed: s.Seed, Requests: rows}); err != nil {
			return sums, err
		}
		done = append(done, s.Seed)
		meta := capture.Cell{Arm: c.Arm, Beta: c.Beta, Rate: c.Rate, Start: unix(start), End: unix(end)}
		if err := capture.WriteMeta(c.Dir, meta, done, c.Extra); err != nil {
			return sums, err
		}
	}
	if len(done) > 0 && metrics != nil {
		series, err := metrics(start, end)
		if err != nil {
			return sums, fmt.Errorf("drive: engine metrics for %s: %w", c.Dir, err)
		}
		for stem, ss := range series {
			if err := capture.WriteProm(c.Dir, stem, ss); err != nil {
				return sums, err
			}
		}
		if len(series[capture.RunningMetric]) == 0 {
			return sums, fmt.Errorf("drive: %s: no %s series was recorded: name the engines (-engines) or a Prometheus server (-prometheus) so the capture has the engines' running counts", c.Dir, capture.RunningMetric)
		}
		for i := range sums {
			sums[i].Imbalance = capture.Imbalance(series[capture.RunningMetric], windows[i][0], windows[i][1])
		}
	}
	if stopped {
		return sums, ErrStopped
	}
	return sums, nil
}

var errStopped = errors.New("stopped")

// runSeed sends reqs open loop from now and returns their rows in request
// order. Requests not yet sent when ctx ends are not sent: the seed is then
// incomplete and errStopped is returned.
func runSeed(ctx context.Context, reqs []workload.Request, send Send, lim Limits, t *tally) ([]capture.Request, error) {
	rows := make([]capture.Request, len(reqs))
	slots := make(chan struct{}, lim.MaxInFlight)
	var wg sync.WaitGroup
	base := time.Now()
	sent := 0
	for i, r := range reqs {
		if wait := time.Until(base.Add(r.SendAt)); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil { // a slot taken then is never used: the loop ends here
			break
		}
		sent++
		wg.Add(1)
		at := time.Now() // stamped in send order, so rows are in send order as replay requires
		go func() {
			defer func() { <-slots; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, lim.RequestTimeout)
			o := send(rctx, r)
			cancel()
			rows[i] = row(r, at, o)
			t.add(o.Err != nil)
		}()
	}
	wg.Wait()
	if sent < len(reqs) {
		return nil, errStopped
	}
	return rows, nil
}

func row(r workload.Request, at time.Time, o Outcome) capture.Request {
	q := capture.Request{
		Index: r.Index, PrefixID: max(r.PrefixID, 0), Send: unix(at),
		TTFT: o.TTFT.Seconds(), E2E: o.E2E.Seconds(),
		PromptTokens: o.PromptTokens, CompletionTokens: o.CompletionTokens, OK: o.Err == nil,
	}
	if o.Err != nil {
		q.Error = o.Err.Error()
	}
	for _, d := range o.ITLs {
		q.ITLs = append(q.ITLs, float64(d.Microseconds())/1e3)
	}
	return q
}

// span is the first send and the last end among rows.
func span(rows []capture.Request) (first, last time.Time) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		lo, hi = min(lo, r.Send), max(hi, r.Send+r.E2E)
	}
	if !(hi > lo) {
		hi = lo + 1e-3
	}
	return fromUnix(lo), fromUnix(hi)
}

func unix(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func fromUnix(s float64) time.Time { return time.UnixMicro(int64(math.Round(s * 1e6))) }

// tally counts finished requests for the progress callback.
type tally struct {
	mu                  sync.Mutex
	done, failed, total int
	progress            Progress
}

func (t *tally) add(failed bool) {
	if t.progress == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done++
	if failed {
		t.failed++
	}
	t.progress(t.done, t.total, t.failed)
}
