package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/bench/extload"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	zmq "github.com/pebbe/zmq4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The hostile clients run in the test's process, beside the picker, unless
// LOADAWARE_SOAK_HOSTILE_PROCESS=own puts them in a process of their own, as they would be
// beside a deployed picker: their own sending then takes none of the picker's processors,
// run queues or collections (decision 1142 measures both).

// targets are where the hostile clients send, and which of them run.
type targets struct {
	GRPC, Metrics, LMCachePull, Gateway string
	Clients                             string // LOADAWARE_SOAK_HOSTILE: names, comma-separated; "" for all
	CPUs                                []int  // the CPUs their own process runs on (pinSoak); nil: any
}

// pinSoak pins the soak's processes apart when LOADAWARE_SOAK_PIN=1 (with
// LOADAWARE_SOAK_HOSTILE_PROCESS=own): the test's process (picker, gateway, engines, steady
// clients) on the last CPU it may use, alone, with GOMAXPROCS 1 (a picker in a one-core
// pod), and the hostile clients' process on the others, so that their sending takes none of
// its CPU (decision 1151). It returns the hostile clients' CPUs, nil when not pinning, and
// undoes the pinning when t ends.
func pinSoak(t *testing.T) []int {
	if os.Getenv("LOADAWARE_SOAK_PIN") != "1" {
		return nil
	}
	if os.Getenv("LOADAWARE_SOAK_HOSTILE_PROCESS") != "own" {
		t.Fatal("LOADAWARE_SOAK_PIN=1 pins the hostile clients' process apart from the picker's: set LOADAWARE_SOAK_HOSTILE_PROCESS=own too")
	}
	cpus, err := extload.CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Fatalf("LOADAWARE_SOAK_PIN=1 needs two CPUs or more; this process may use %v", cpus)
	}
	restore, err := extload.Pin(cpus[len(cpus)-1:])
	if err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(1)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(procs)
		if err := restore(); err != nil {
			t.Errorf("give the soak's threads back their CPUs: %v", err)
		}
	})
	return cpus[:len(cpus)-1]
}

func (tg targets) on(name string) bool {
	return tg.Clients == "" || slices.Contains(strings.Split(tg.Clients, ","), name)
}

// sent is what the hostile clients got out so far, and how many of their requests the
// picker refused.
type sent struct {
	Refused, BodyBytes, LMCacheFrames, PromptsRouted, SharedBytes int64
}

type counters struct {
	refused, bodyBytes, lmcacheFrames, promptsRouted, sharedBytes atomic.Int64
}

func (c *counters) sent() sent {
	return sent{c.refused.Load(), c.bodyBytes.Load(), c.lmcacheFrames.Load(), c.promptsRouted.Load(), c.sharedBytes.Load()}
}

// hostileRun is a run of the hostile clients, prepared before the measured window: their
// process started, their connections made and their payloads built (decision 1183), so that
// the window measures their load and not their start-up. start sets them going; now reads
// their counters at any time; wait waits for them to stop (after the context given to
// prepareHostile ends) and returns the last; cpu is their process's CPU time so far (0 when
// they run in the test's process, whose CPU the soak reports whole).
type hostileRun struct {
	start func()
	now   func() sent
	wait  func() sent
	cpu   func() time.Duration
}

const (
	childEnv    = "LOADAWARE_SOAK_HOSTILE_TARGETS" // set only in the hostile clients' process: targets as JSON
	sentPrefix  = "hostile-sent: "                 // the child's counter lines on its stdout
	readyLine   = "hostile-ready"                  // the child's line once its clients are prepared
	startLine   = "go"                             // the parent's line on the child's stdin: start sending
	readyWithin = 30 * time.Second                 // how long preparing the clients may take
)

// prepareHostile prepares the hostile clients against tg, to run until ctx ends: in the
// test's process, or with LOADAWARE_SOAK_HOSTILE_PROCESS=own in a child process (this test
// binary running TestSoakHostile, started by a line on its stdin and ended by closing it).
// It returns once they are ready to send.
func prepareHostile(ctx context.Context, t *testing.T, tg targets) *hostileRun {
	if os.Getenv("LOADAWARE_SOAK_HOSTILE_PROCESS") != "own" {
		var c counters
		done, ready, start := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			if err := runHostile(ctx, tg, &c, t.Errorf, func() { close(ready) }, start); err != nil {
				t.Errorf("the hostile clients: %v", err)
			}
		}()
		select {
		case <-ready:
		case <-done:
			t.Fatal("the hostile clients stopped before they were ready")
		}
		return &hostileRun{start: sync.OnceFunc(func() { close(start) }), now: c.sent,
			wait: func() sent { <-done; return c.sent() }, cpu: func() time.Duration { return 0 }}
	}
	spec, err := json.Marshal(tg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSoakHostile$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the hostile clients' process: %v", err)
	}
	var last atomic.Pointer[sent]
	last.Store(&sent{})
	read, ready := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == readyLine {
				close(ready)
			}
			if v, ok := strings.CutPrefix(sc.Text(), sentPrefix); ok {
				var s sent
				if json.Unmarshal([]byte(v), &s) == nil {
					last.Store(&s)
				}
			}
		}
	}()
	go func() {
		<-ctx.Done()
		stdin.Close()
	}()
	select {
	case <-ready:
	case <-read:
		t.Fatal("the hostile clients' process ended before its clients were ready")
	case <-time.After(readyWithin):
		t.Fatalf("the hostile clients' process did not get ready within %v", readyWithin)
	}
	pid := cmd.Process.Pid
	return &hostileRun{
		start: sync.OnceFunc(func() {
			if _, err := io.WriteString(stdin, startLine+"\n"); err != nil {
				t.Errorf("start the hostile clients: %v", err)
			}
		}),
		now: func() sent { return *last.Load() },
		wait: func() sent {
			<-read
			if err := cmd.Wait(); err != nil {
				t.Errorf("the hostile clients' process: %v", err)
			}
			return *last.Load()
		},
		cpu: func() time.Duration { return processCPU(pid) },
	}
}

// TestSoakHostile is the hostile clients' process of TestSoak (see prepareHostile): it
// prepares them against the targets in its environment, says so on stdout, starts them at
// the first line on its stdin and runs them until its stdin closes, writing their counters
// to stdout four times a second and once at the end.
func TestSoakHostile(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("the soak's hostile clients run here only as TestSoak's child process")
	}
	var tg targets
	if err := json.Unmarshal([]byte(spec), &tg); err != nil {
		t.Fatalf("%s=%q: %v", childEnv, spec, err)
	}
	if tg.CPUs != nil {
		if _, err := extload.Pin(tg.CPUs); err != nil {
			t.Fatal(err)
		}
		runtime.GOMAXPROCS(len(tg.CPUs))
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	start := make(chan struct{})
	go func() {
		in := bufio.NewReader(os.Stdin)
		if line, err := in.ReadString('\n'); err == nil && strings.TrimSpace(line) == startLine {
			close(start)
		}
		_, _ = io.Copy(io.Discard, in)
		stop()
	}()
	var c counters
	done := make(chan error, 1)
	go func() { done <- runHostile(ctx, tg, &c, t.Errorf, func() { fmt.Println(readyLine) }, start) }()
	write := func() {
		b, _ := json.Marshal(c.sent())
		fmt.Println(sentPrefix + string(b))
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			write()
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-tick.C:
			write()
		}
	}
}

// runHostile runs the hostile clients named in tg until ctx ends, counting what they get
// out in c; fail reports a client's failure. It first prepares them (their connections
// made, their payloads built), then calls ready and waits for start: the clients send
// nothing before start is closed.
func runHostile(ctx context.Context, tg targets, c *counters, fail func(format string, args ...any), ready func(), start <-chan struct{}) error {
	// Every client runs until ctx ends; their connections close after the last has stopped.
	var hostile sync.WaitGroup
	var closers []io.Closer
	defer func() {
		hostile.Wait()
		for _, c := range closers {
			c.Close()
		}
	}()
	// A client launched before a failure in preparing the next one ends with this context.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	on := tg.on
	// launch runs f once start is closed (never, when ctx ends first).
	launch := func(f func()) {
		hostile.Go(func() {
			select {
			case <-start:
				f()
			case <-ctx.Done():
			}
		})
	}
	dial := func() (*grpc.ClientConn, error) { // connected before start, so that start sends at once
		conn, err := grpc.NewClient(tg.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		closers = append(closers, conn)
		dctx, cancel := context.WithTimeout(ctx, readyWithin)
		defer cancel()
		conn.Connect()
		for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
			if !conn.WaitForStateChange(dctx, s) {
				return nil, fmt.Errorf("connect to the picker's ext_proc port %s: %v", tg.GRPC, s)
			}
		}
		return conn, nil
	}

	// 1. Unfinished bodies: 32 streams at a time, each sending 4 MiB and never ending it.
	conn, err := dial()
	if err != nil {
		return err
	}
	ext := extprocv3.NewExternalProcessorClient(conn)
	chunk := make([]byte, 256<<10)
	for range 32 {
		if !on("bodies") {
			break
		}
		launch(func() {
			for ctx.Err() == nil {
				st, err := ext.Process(ctx)
				if err != nil {
					return
				}
				_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}}}})
				ended := make(chan struct{})
				go func() { // the answer: a refusal (503 over budget, 408 idle), then the end
					defer close(ended)
					for {
						r, err := st.Recv()
						if err != nil {
							return
						}
						if r.GetImmediateResponse() != nil {
							c.refused.Add(1)
						}
					}
				}()
				for range 16 {
					if st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: chunk}}}) != nil {
						break
					}
					c.bodyBytes.Add(int64(len(chunk)))
				}
				select { // hold it until the picker ends it
				case <-ended:
				case <-ctx.Done():
					<-ended
				}
			}
		})
	}
	// 2. STREAMED body mode from Envoy: routed at the headers, every chunk answered.
	goIf := func(name string, f func()) {
		if on(name) {
			launch(f)
		}
	}
	// 5. Tokenizer amplification: 4 streams at a time on their own connection, each a
	// completion whose prompt is one run of whitespace just under --max-prompt-bytes (the
	// worst shape to tokenize), ended as soon as it is routed.
	if on("prompts") {
		pconn, err := dial()
		if err != nil {
			return err
		}
		pext := extprocv3.NewExternalProcessorClient(pconn)
		prompt := []byte(`{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat(" ", picker.DefaultMaxPromptBytes-64) + `"}`)
		for range 4 {
			launch(func() {
				for ctx.Err() == nil {
					sctx, cancel := context.WithCancel(ctx)
					st, err := pext.Process(sctx)
					if err != nil {
						cancel()
						return
					}
					_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
						Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}}}})
					_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: prompt, EndOfStream: true}}})
					if _, err := st.Recv(); err == nil { // the routing answer: the prompt was tokenized or refused
						c.promptsRouted.Add(1)
					}
					cancel()
				}
			})
		}
	}
	// 6. Large bodies through the gateway: 4 HTTP clients at a time sending 1 MiB completions,
	// so they share the gateway's ext_proc connection with the steady traffic (as one Envoy
	// worker's requests share its connection).
	if on("shared") {
		big := `{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat("a", 1<<20-64) + `"}`
		client := &http.Client{Timeout: 30 * time.Second}
		for range 4 {
			launch(func() {
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.Gateway+"/v1/completions", strings.NewReader(big))
					if err != nil {
						return
					}
					resp, err := client.Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					c.sharedBytes.Add(int64(len(big)))
				}
			})
		}
	}
	goIf("streamed", func() {
		for ctx.Err() == nil {
			st, err := ext.Process(ctx)
			if err != nil {
				return
			}
			hdr := &extprocv3.ProcessingRequest{ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_STREAMED},
				Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}}}}
			for _, r := range []*extprocv3.ProcessingRequest{hdr,
				{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m",`)}}},
				{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`"prompt":"x"}`), EndOfStream: true}}},
				{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}}} {
				if st.Send(r) != nil {
					break
				}
				if _, err := st.Recv(); err != nil {
					if status.Code(err) == codes.ResourceExhausted { // over --grpc-conn-stream-rate
						c.refused.Add(1)
						break
					}
					if ctx.Err() == nil {
						fail("a STREAMED-mode stream failed: %v", err)
					}
					return
				}
			}
			_ = st.CloseSend()
			_, _ = st.Recv()
		}
	})
	// 3. Idle connections to the metrics port, replaced as they are closed.
	goIf("conns", func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for ctx.Err() == nil {
			for len(held) < 500 {
				c, err := net.DialTimeout("tcp", tg.Metrics, time.Second)
				if err != nil {
					break
				}
				held = append(held, c)
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			held = slices.DeleteFunc(held, func(c net.Conn) bool { // drop the ones the server closed
				_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
				_, err := c.Read(make([]byte, 1))
				if err != nil && !isTimeout(err) {
					c.Close()
					return true
				}
				return false
			})
		}
	})
	// 4. An engine's IP pushing junk: new instance ids and random keys as fast as it can.
	if on("lmcache") {
		push, err := lmcachePush(tg.LMCachePull)
		if err != nil {
			return fmt.Errorf("the lmcache client: %w", err)
		}
		closers = append(closers, push)
		launch(func() {
			r := rand.New(rand.NewPCG(1, 2))
			for i := 0; ctx.Err() == nil; i++ {
				var frames [][]byte
				for range 50 {
					m := lmcache.KVAdmitMsg{InstanceID: fmt.Sprintf("junk-%d", r.IntN(1_000_000)), Key: int64(r.Uint64()), Location: "cpu"}
					if i%2 == 0 {
						m.InstanceID = "junk-0" // and one instance filling the key budget
					}
					b, _ := lmcache.Encode(m)
					frames = append(frames, b)
				}
				if _, err := push.SendMessage(frames); err == nil {
					c.lmcacheFrames.Add(int64(len(frames)))
				}
			}
		})
	}

	ready()
	<-ctx.Done()
	return nil
}

// zmqPush is a ZeroMQ PUSH socket and its context, closed together.
type zmqPush struct {
	*zmq.Socket
	zctx *zmq.Context
}

// lmcachePush connects a PUSH socket to the controller's pull address.
func lmcachePush(addr string) (*zmqPush, error) {
	zctx, err := zmq.NewContext()
	if err != nil {
		return nil, err
	}
	push, err := zctx.NewSocket(zmq.PUSH)
	if err != nil {
		zctx.Term()
		return nil, err
	}
	p := &zmqPush{push, zctx}
	_ = push.SetLinger(0)
	_ = push.SetSndtimeo(100 * time.Millisecond)
	if err := push.Connect("tcp://" + addr); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *zmqPush) Close() error {
	err := p.Socket.Close()
	if terr := p.zctx.Term(); err == nil {
		err = terr
	}
	return err
}

// processCPU is process pid's user and system CPU time so far (/proc/pid/stat), 0 when it
// cannot be read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/pid/stat's times: 100 on Linux's
// every architecture Go supports.
const clockTicks = 100
