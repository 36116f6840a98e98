package live

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// ReplicaStats are the figures of a run with several picker replicas.
type ReplicaStats struct {
	Replicas int
	Naive    bool // no shared state
	// Messages and Bytes are the shared-state messages and payload bytes all replicas
	// published over the measured seed (frames, deltas, states; 0 when naive).
	Messages, Bytes float64
	// Corrections counts the load views the engines' scraped counts corrected (every
	// replica, the whole run: loadaware_replica_load_corrections_total).
	Corrections float64
	// DecisionP50 and DecisionP99 are the gateway's picker times (headers sent to the
	// destination known) over the seed's requests.
	DecisionP50, DecisionP99 time.Duration
	// Killed is whether a replica was killed; KilledAt when, from the seed's start.
	Killed   bool
	KilledAt time.Duration
	// FailedOnKilled counts failed requests that the killed replica was serving when it
	// died; FailedElsewhere every other failed request (the target: 0).
	FailedOnKilled, FailedElsewhere int
	// ViewHealed is how long after the kill every survivor's in-flight view first equalled
	// the survivors' own bookings on every endpoint; -1 when it never did within 10 s.
	ViewHealed time.Duration
}

// replicaSet is a live fleet's pickers, their gateways and the front spreading requests.
type replicaSet struct {
	apps  []*app.App
	gws   []*gateway.Gateway
	naive bool
	nats  *natsserver.Server

	rmu      sync.Mutex
	rotation []int          // replicas in the front's rotation
	turn     int            // next position in rotation
	served   map[string]int // request id -> replica
	killed   int            // the killed replica; -1: none
	killedAt time.Time
	healed   chan time.Duration
}

// startNATS runs a real NATS server in process on a free loopback port, ready for clients.
func startNATS() (*natsserver.Server, error) {
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("NATS server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("NATS server did not start within 10 s")
	}
	return s, nil
}

func (f *liveFleet) startApps(ctx context.Context, acfg app.Config, log *slog.Logger, opts Options) error {
	n := max(opts.Replicas, 1)
	f.naive, f.killed, f.served = opts.Naive, -1, map[string]int{}
	var url string
	if n > 1 && !opts.Naive {
		s, err := startNATS()
		if err != nil {
			return err
		}
		f.nats, url = s, s.ClientURL()
	}
	for i := range n {
		c := acfg
		if url != "" {
			c.Replicas = &app.ReplicaConfig{URL: url, Name: fmt.Sprintf("replica-%d", i)}
		}
		a, err := app.Start(ctx, c, log)
		if err != nil {
			return err
		}
		f.apps = append(f.apps, a)
		if err := f.awaitReady(ctx, a); err != nil {
			return err
		}
		f.rotation = append(f.rotation, i)
	}
	f.app = f.apps[0]
	return nil
}

// awaitReady waits until a's /readyz answers 200 (its index warm, its endpoints known).
func (f *liveFleet) awaitReady(ctx context.Context, a *app.App) error {
	return poll(ctx, 15*time.Second, "a picker replica did not turn ready", func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.MetricsAddr()+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := f.client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (f *liveFleet) dialGateways(log *slog.Logger, failOpen bool) error {
	var fallback []string
	if failOpen {
		for _, e := range f.engines {
			fallback = append(fallback, e.Addr())
		}
	}
	for _, a := range f.apps {
		gw, err := gateway.Dial(a.GRPCAddr(), gateway.Options{GenerateRequestID: true, Logger: log, FailOpen: failOpen, Fallback: fallback,
			OnOutcome: func(o gateway.Outcome) {
				f.mu.Lock()
				f.outcomes[o.RequestID] = o
				f.mu.Unlock()
			}})
		if err != nil {
			return fmt.Errorf("live: gateway: %w", err)
		}
		f.gws = append(f.gws, gw)
	}
	f.gw = f.gws[0]
	return nil
}

// front spreads requests over the replicas in the rotation, one after another.
func (f *liveFleet) front() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.rmu.Lock()
		i := f.rotation[f.turn%len(f.rotation)]
		f.turn++
		f.served[r.Header.Get("X-Request-Id")] = i
		f.rmu.Unlock()
		f.gws[i].ServeHTTP(w, r)
	})
}

// awaitReplicasSynced waits until every shared replica has applied everything every other
// one has published (bookings, releases and LMCache frames); without shared replicas it
// returns at once.
func (f *liveFleet) awaitReplicasSynced(ctx context.Context) error {
	if len(f.apps) < 2 || f.naive {
		return nil
	}
	return poll(ctx, 10*time.Second, "the replicas did not hear each other's messages", func() (bool, error) {
		for i, from := range f.apps {
			if i == f.killed {
				continue
			}
			load, frames := from.Replica.Published()
			for j, to := range f.apps {
				if j == i || j == f.killed {
					continue
				}
				if l, fr := to.Replica.Heard(from.Replica.Origin()); l < load || fr < frames {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

func (f *liveFleet) waitGateways() {
	for _, g := range f.gws {
		g.Wait()
	}
}

func (f *liveFleet) closeGateways() {
	for _, g := range f.gws {
		_ = g.Close()
	}
}

func (f *liveFleet) closeApps() {
	for i, a := range f.apps {
		if i != f.killed {
			_ = a.Close()
		}
	}
	if f.nats != nil {
		f.nats.Shutdown()
	}
}

// killLast takes the last replica out of the rotation (as Envoy's health checks would)
// and kills it; a goroutine then watches the survivors' in-flight view heal.
func (f *liveFleet) killLast() {
	k := len(f.apps) - 1
	f.rmu.Lock()
	f.rotation = slices.DeleteFunc(f.rotation, func(i int) bool { return i == k })
	f.killed, f.killedAt = k, time.Now()
	f.healed = make(chan time.Duration, 1)
	f.rmu.Unlock()
	f.apps[k].Kill()
	go func() { f.healed <- f.watchHealing(k) }()
}

// watchHealing returns how long after the kill every survivor's view of every endpoint
// first equalled the sum of the survivors' own bookings (-1 if not within 10 s).
func (f *liveFleet) watchHealing(killed int) time.Duration {
	deadline := f.killedAt.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		var survivors []*app.App
		for i, a := range f.apps {
			if i != killed {
				survivors = append(survivors, a)
			}
		}
		eps := survivors[0].Fleet.Endpoints()
		truth := make([]int, len(eps))
		for _, a := range survivors {
			for j, l := range a.Fleet.LocalLoads(eps) {
				truth[j] += l.InFlight()
			}
		}
		for _, a := range survivors {
			for j, l := range a.Fleet.Loads(eps) {
				if l.InFlight() != truth[j] {
					ok = false
				}
			}
		}
		if ok {
			return time.Since(f.killedAt)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return -1
}

// sentMetrics are the shared-state counters a seed's replica figures are differences of:
// messages and payload bytes published; replicaStats reads the load corrections with them.
var sentMetrics = []string{"loadaware_replica_messages_sent_total", "loadaware_replica_bytes_sent_total"}

// replicaStats fills the figures of a run with replicas from its outcomes (by request
// id), which requests failed, and the sentMetrics sums before the seed.
func (f *liveFleet) replicaStats(ctx context.Context, start time.Time, outcomes map[string]gateway.Outcome, ids []string, failed []bool, before []float64) ReplicaStats {
	st := ReplicaStats{Replicas: len(f.apps), Naive: f.naive, ViewHealed: -1}
	now := f.replicaSums(ctx, append(sentMetrics, "loadaware_replica_load_corrections_total")...)
	st.Messages, st.Bytes, st.Corrections = now[0]-before[0], now[1]-before[1], now[2]
	var times []time.Duration
	for _, id := range ids {
		if o, ok := outcomes[id]; ok && o.PickerTime > 0 {
			times = append(times, o.PickerTime)
		}
	}
	slices.Sort(times)
	if len(times) > 0 {
		st.DecisionP50 = times[len(times)/2]
		st.DecisionP99 = times[min(len(times)-1, len(times)*99/100)]
	}
	f.rmu.Lock()
	defer f.rmu.Unlock()
	if f.killed >= 0 {
		st.Killed, st.KilledAt = true, f.killedAt.Sub(start)
		for i, id := range ids {
			if !failed[i] {
				continue
			}
			if f.served[id] == f.killed {
				st.FailedOnKilled++
			} else {
				st.FailedElsewhere++
			}
		}
		st.ViewHealed = <-f.healed
	}
	return st
}

// replicaSums sums each named metric over the live replicas' /metrics; a replica whose
// page cannot be read counts for none of them.
func (f *liveFleet) replicaSums(ctx context.Context, names ...string) []float64 {
	sums := make([]float64, len(names))
	for i, a := range f.apps {
		if i == f.killed {
			continue
		}
		m, err := scrape(ctx, f.client, "http://"+a.MetricsAddr()+"/metrics")
		if err != nil {
			continue
		}
		for j, name := range names {
			sums[j] += m[name]
		}
	}
	return sums
}
