package lmcache

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pacedSenderEnv, set in a process of this test binary, makes it an LMCache worker for
// BenchmarkServerIngestPaced instead of running tests: "ADDR,BATCHES,PER_SECOND" pushes
// BATCHES batches of 7 KV admits to ADDR, evenly spaced at PER_SECOND, then exits. It runs
// in its own process so that the benchmark's CPU figure is the server's alone.
const pacedSenderEnv = "LMCACHE_TEST_PACED_SENDER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(pacedSenderEnv); spec != "" {
		if err := pacedSend(spec); err != nil {
			fmt.Fprintln(os.Stderr, "paced sender:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pacedSend is the sender process's work (see pacedSenderEnv).
func pacedSend(spec string) error {
	f := strings.Split(spec, ",")
	if len(f) != 3 {
		return fmt.Errorf("%s=%q: want ADDR,BATCHES,PER_SECOND", pacedSenderEnv, spec)
	}
	n, err1 := strconv.Atoi(f[1])
	rate, err2 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil || n < 1 || rate <= 0 {
		return fmt.Errorf("%s=%q: BATCHES and PER_SECOND must be positive numbers", pacedSenderEnv, spec)
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		return err
	}
	defer zctx.Term()
	push, err := zctx.NewSocket(zmq.PUSH)
	if err != nil {
		return err
	}
	defer push.Close()
	if err := push.Connect("tcp://" + f[0]); err != nil {
		return err
	}
	reg, err := Encode(regMsg("vllm-0", 0, "10.0.0.7"))
	if err != nil {
		return err
	}
	if _, err := push.SendBytes(reg, 0); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(4, 4))
	frames := make([][]byte, 7)
	every := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for range n {
		for j := range frames {
			if frames[j], err = Encode(KVAdmitMsg{InstanceID: "vllm-0", Key: int64(r.Uint64()), Location: "LocalCPUBackend"}); err != nil {
				return err
			}
		}
		next = next.Add(every)
		time.Sleep(time.Until(next))
		if _, err := push.SendMessage(frames); err != nil {
			return err
		}
	}
	return push.SetLinger(5 * time.Second) // Close then waits for the queue to go out
}

// BenchmarkServerIngestPaced is an engine's worker pushing 200 batches of 7 admits a second,
// as extload -lmcache-rate 200 does, from a process of its own: one op is one batch
// (-benchtime 400x is two seconds). cpu-us/batch is this process's CPU (the pull loop and
// ZeroMQ's I/O thread) per batch, the cost of each batch's wake-ups included, which a
// benchmark pushing as fast as it can (BenchmarkServerIngest) amortizes away.
func BenchmarkServerIngestPaced(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	idx, srv := startIngestServer(b)
	defer srv.Close()
	applied := func() float64 { return testutil.ToFloat64(idx.met.ops[0][0]) }
	base := applied()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,200", pacedSenderEnv, srv.PullAddr(), b.N))
	cmd.Stderr = os.Stderr
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("the sender process: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for applied()-base < float64(7*b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("applied %v of %d admits", applied()-base, 7*b.N)
		}
		time.Sleep(time.Millisecond)
	}
	cpu1, _ := processCPU()
	b.StopTimer()
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/batch")
	}
}

// BenchmarkIngestBesideWork is the picker's situation in extload -rates 2000 -lmcache-rate
// 200, in miniature: with GOMAXPROCS 1, a loopback echo whose handler works a fixed
// 100,000 loop iterations (about 100 µs) per request is pinged 2,000 times a second (one op is one ping: -benchtime 4000x is two
// seconds) while an engine's worker in another process pushes 200 batches of 7 admits a
// second to the controller. p50-us, p99-us and p999-us are the pings' round trips;
// cpu-us/op is the process's CPU per ping, the echo's work, the pings' and ingestion's.
// ingest=none pushes nothing (the floor), ingest=200/s the batches.
func BenchmarkIngestBesideWork(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		ingest bool
	}{
		{"ingest=none", false},
		{"ingest=200/s", true},
	} {
		b.Run(c.name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			_, srv := startIngestServer(b)
			defer srv.Close()
			conn, stop := startWorkEcho(b, 100_000)
			defer stop()
			var cmd *exec.Cmd
			if c.ingest {
				cmd = exec.Command(exe)
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,200", pacedSenderEnv, srv.PullAddr(), b.N/10+1))
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]byte, 8)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			cpu0, cpuOK := processCPU()
			next := time.Now()
			for range b.N {
				next = next.Add(500 * time.Microsecond)
				time.Sleep(time.Until(next))
				t0 := time.Now()
				if _, err := conn.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn, buf); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			cpu1, _ := processCPU()
			b.StopTimer()
			if cmd != nil {
				if err := cmd.Wait(); err != nil {
					b.Fatalf("the sender process: %v", err)
				}
			}
			slices.Sort(lat)
			us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
			b.ReportMetric(us(0.5), "p50-us")
			b.ReportMetric(us(0.99), "p99-us")
			b.ReportMetric(us(0.999), "p999-us")
			if cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			}
		})
	}
}

// startWorkEcho serves an echo on loopback TCP that works (loops) work times before each
// answer, and returns a connection to it.
func startWorkEcho(b *testing.B, work int) (net.Conn, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			x := uint64(n)
			for i := range work {
				x = x*0x9E3779B97F4A7C15 + uint64(i)
			}
			if x == 0 { // practically never; the loop's result is used, so it stays
				buf[0]++
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return conn, func() {
		conn.Close()
		ln.Close()
		<-done
	}
}

// BenchmarkIngestOnset is the soak's onset in miniature: a fresh controller at the default
// per-IP rate (its bucket full: the 1 MiB burst), one peer pushing the soak's junk batches
// (50 admits of one instance, encoded beforehand) as fast as it can for 500 ms. One iteration is one onset.
// loop-ms is the pull loop's CPU over it (its thread's clock), paused-ms how long its
// budget stopped it, events the admits applied; cpu=off has no budget, cpu=default the
// default's quarter of a CPU with 10 ms at once.
func BenchmarkIngestOnset(b *testing.B) {
	for _, c := range []struct {
		name  string
		share float64
	}{{"off", -1}, {"default", 0}} {
		b.Run("cpu="+c.name, func(b *testing.B) {
			var loop, paused, events float64
			for range b.N {
				l, p, e := ingestOnset(b, c.share, 500*time.Millisecond)
				loop, paused, events = loop+l, paused+p, events+e
			}
			n := float64(b.N)
			b.ReportMetric(loop*1000/n, "loop-ms")
			b.ReportMetric(paused*1000/n, "paused-ms")
			b.ReportMetric(events/n, "events")
		})
	}
}

// ingestOnset runs one onset of BenchmarkIngestOnset and returns the pull loop's CPU and
// pause, in seconds, and the admits applied.
func ingestOnset(b *testing.B, share float64, d time.Duration) (loop, paused, events float64) {
	idx := newTestIndex(b, IndexConfig{MaxKeys: 200_000})
	srv, err := NewServer(ServerConfig{PullAddr: "127.0.0.1:0", Allow: AllowAny, IngestCPU: share}, idx, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	push, closePush := pushSocket(b, srv.PullAddr(), 10*time.Millisecond)
	defer closePush()
	r := rand.New(rand.NewPCG(1, 2))
	batches := make([][][]byte, 2000) // 100,000 admits, encoded before the onset
	for i := range batches {
		batches[i] = make([][]byte, 50)
		for j := range batches[i] {
			batches[i][j], _ = Encode(KVAdmitMsg{InstanceID: "junk-0", Key: int64(r.Uint64()), Location: "cpu"})
		}
	}
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		_, _ = push.SendMessage(batches[i%len(batches)]) // a full queue times out: the sender is blocked
	}
	loop, paused = testutil.ToFloat64(srv.ingestCPU), testutil.ToFloat64(srv.ingestPaused)
	return loop, paused, testutil.ToFloat64(idx.met.ops[0][0])
}
