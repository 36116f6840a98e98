package live

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
)

// TestRestartedPickerDecidesAsAnUninterruptedOne is issue 14's restart target over real
// sockets: two engines push LMCache messages over ZeroMQ to an uninterrupted picker and to
// one that is killed and started again, either alone with --state-file or as a replica
// warmed by its peer over a real NATS server. The engines keep pushing while it is down
// (ZeroMQ queues for a peer that comes back). Soon after the restarted picker's /readyz
// (the log says when: about 0.2 s with the state file on a quiet host; the check allows
// 10 s), every prompt must be routed as the uninterrupted picker routes it; without
// either, the restarted picker is blind to what was cached before its crash (not equal
// within 2 s).
func TestRestartedPickerDecidesAsAnUninterruptedOne(t *testing.T) {
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 16}
	ips := []string{"127.0.1.1", "127.0.1.2"}
	endpoints := []string{"127.0.1.1:8000", "127.0.1.2:8000"}
	prompt := func(i int) []uint32 {
		out := make([]uint32, 64)
		for j := range out {
			out[j] = uint32(i*1000 + j)
		}
		return out
	}
	tests := []struct {
		name      string
		stateFile bool
		peer      bool
		wantEqual bool
	}{
		{"state file", true, false, true},
		{"warm start from a peer", false, true, true},
		{"neither: blind after the restart", false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var natsURL string
			if tc.peer {
				s, err := startNATS()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Shutdown)
				natsURL = s.ClientURL()
			}
			path := filepath.Join(t.TempDir(), "state")
			pull := restartAddr(t)
			start := func(pullAddr string, restartable bool) *app.App {
				cfg := app.Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0", Endpoints: endpoints,
					Policy: "kvaware", LMCache: &app.LMCacheConfig{PullAddr: pullAddr, Keys: keys, Allow: lmcache.AllowFleet}}
				if restartable && tc.stateFile {
					cfg.StateFile = &app.StateFileConfig{Path: path, Interval: 20 * time.Millisecond}
				}
				if natsURL != "" {
					// A peer timeout of seconds: the restarted picker warms from the peers it
					// heard lately, and a loaded -race host can leave 200 ms between two states.
					cfg.Replicas = &app.ReplicaConfig{URL: natsURL, StateInterval: 20 * time.Millisecond, PeerTimeout: 5 * time.Second, ScrapeInterval: -1}
				}
				// The pull port can be briefly taken: the killed picker's ZeroMQ socket closes
				// in ZeroMQ's own thread, and an engine reconnecting to a port nobody listens
				// on can be given that very port for its own end (a TCP self-connection,
				// which ZeroMQ drops at the handshake). Nothing signals the port free again,
				// so the start is tried again for a while.
				var a *app.App
				awaitTrue(t, 10*time.Second, "the picker started on "+pullAddr, func() bool {
					var err error
					if a, err = app.Start(ctx, cfg, nil); err != nil && !strings.Contains(err.Error(), "address already in use") {
						t.Fatal(err)
					}
					return err == nil
				})
				awaitReadyz(t, a)
				return a
			}
			steady := start("127.0.0.1:0", false)
			t.Cleanup(func() { _ = steady.Close() })
			restarted := start(pull, true)

			// Each engine pushes to both pickers, as the bench's engines push to theirs.
			var pushers []*pusher
			for _, ip := range ips {
				for _, to := range []string{steady.LMCachePullAddr(), pull} {
					p, err := startPusher(ip, to, nil)
					if err != nil {
						t.Fatal(err)
					}
					pushers = append(pushers, p)
				}
			}
			t.Cleanup(func() {
				for _, p := range pushers {
					_ = p.close()
				}
			})
			h, err := lmcache.NewHasher(keys)
			if err != nil {
				t.Fatal(err)
			}
			say := func(engine int, msgs ...lmcache.Message) {
				for _, p := range pushers[2*engine : 2*engine+2] {
					for _, m := range msgs {
						if err := p.enqueue(m); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			admit := func(engine, promptID int) {
				for _, k := range h.ChunkKeys(prompt(promptID)) {
					say(engine, lmcache.KVAdmitMsg{InstanceID: fmt.Sprintf("engine-%d", engine), Key: k, Location: "LocalCPUBackend"})
				}
			}
			url := "x"
			for e, ip := range ips {
				say(e, lmcache.RegisterMsg{InstanceID: fmt.Sprintf("engine-%d", e), IP: ip, Port: 9, DistributedURL: &url})
			}
			for i := range 8 {
				admit(i%2, i)
			}
			same := func(a, b *app.App) bool {
				for i := range 10 {
					da, err1 := a.Picker.Pick(ctx, picker.Request{Tokens: prompt(i)})
					db, err2 := b.Picker.Pick(ctx, picker.Request{Tokens: prompt(i)})
					if err1 != nil || err2 != nil {
						t.Fatal(err1, err2)
					}
					da.Booking.Release()
					db.Booking.Release()
					if da.Endpoints[0] != db.Endpoints[0] || da.Ranked[0].Matched != db.Ranked[0].Matched {
						return false
					}
				}
				return true
			}
			awaitTrue(t, 10*time.Second, "both pickers hold every prompt", func() bool {
				return steady.LMCacheIndex.Keys() == 8*4 && restarted.LMCacheIndex.Keys() == 8*4
			})
			if tc.stateFile {
				awaitTrue(t, 10*time.Second, "the state file written", func() bool {
					n, err := replicaSaves(restarted)
					return err == nil && n >= 2
				})
			}
			restarted.Kill()
			admit(0, 8) // while it is down: queued by ZeroMQ for the picker that comes back
			admit(1, 9)
			back := start(pull, true)
			ready := time.Now()
			t.Cleanup(func() { _ = back.Close() })
			// A warm picker must catch up with the two admits queued while it was down; a
			// loaded -race host may take seconds to deliver them, so it gets 10 s (it ends
			// as soon as the decisions are equal). A blind one can never catch up: 2 s shows it.
			within := 2 * time.Second
			if tc.wantEqual {
				within = 10 * time.Second
			}
			equal := false
			for time.Since(ready) < within && !equal {
				equal = same(steady, back)
				if !equal {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if equal != tc.wantEqual {
				t.Errorf("decisions equal to the uninterrupted picker's within %v of /readyz: %v, want %v", within, equal, tc.wantEqual)
			}
			if equal {
				t.Logf("equal %v after /readyz", time.Since(ready).Round(time.Millisecond))
			}
		})
	}
}

// restartAddr returns a free loopback address for a picker that is killed and started
// again on it. Its port is below the kernel's ephemeral range: while the picker is down, a
// port in that range can be handed to any outgoing connection on the machine as its source
// port (tests running beside this one connect all the time), and the restart would then
// find it in use for as long as that connection lives (a CI run saw 10 s).
func restartAddr(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	for range 200 {
		port := 1024 + rand.IntN(low-1024)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken: try another
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr
	}
	t.Fatalf("no free loopback port below the ephemeral range (%d) in 200 tries", low)
	return ""
}

func awaitReadyz(t *testing.T, a *app.App) {
	t.Helper()
	awaitTrue(t, 10*time.Second, "/readyz", func() bool {
		resp, err := http.Get("http://" + a.MetricsAddr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// awaitTrue polls cond (a state reached over the network, with no signal to wait on).
func awaitTrue(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func replicaSaves(a *app.App) (float64, error) {
	mfs, err := a.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == "loadaware_replica_state_file_saves_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetValue() == "ok" {
						return m.GetCounter().GetValue(), nil
					}
				}
			}
		}
	}
	return 0, nil
}
