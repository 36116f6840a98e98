package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loadaware/loadaware-epp/internal/testlog"
)

// TestRSSUnderUnfinishedBodies measures what hostile streams make the real binary hold:
// for each count in LOADAWARE_RSS (comma-separated, e.g. "40,200,1000"), a fresh picker
// with default limits (plus LOADAWARE_RSS_FLAGS) gets that many streams over 4 connections,
// each sending request headers announcing a 15 MiB body and then 1 MiB chunks of it, never
// ending it. After LOADAWARE_RSS_HOLD (default 3 s) it reports the process's peak RSS
// (VmHWM), the bytes the senders got through, the picker's CPU time and its refusals by reason. LOADAWARE_RSS_BIN names a binary to run
// instead of building this one (to compare builds). Skipped unless LOADAWARE_RSS is set: it
// builds the binary and takes seconds per count.
func TestRSSUnderUnfinishedBodies(t *testing.T) {
	counts := os.Getenv("LOADAWARE_RSS")
	if counts == "" {
		t.Skip("set LOADAWARE_RSS=40,200,1000 to measure the picker's RSS under unfinished bodies")
	}
	hold := 3 * time.Second
	if v := os.Getenv("LOADAWARE_RSS_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LOADAWARE_RSS_HOLD %q: %v (give a duration such as 3s)", v, err)
		}
		hold = d
	}
	bin := os.Getenv("LOADAWARE_RSS_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "loadaware-epp")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	for _, c := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			t.Fatalf("LOADAWARE_RSS: %q is not a stream count", c)
		}
		peak, sent, idle, ready, startCPU, cpu, refused := rssUnderBodies(t, bin, n, hold)
		t.Logf("streams %5d: peak RSS %6.1f MiB (idle %5.1f MiB, ready after %.2f s and %.2f s of CPU), senders got %7.1f MiB through, picker CPU %5.2f s; refused: %s",
			n, mib(peak), mib(idle), ready.Seconds(), startCPU.Seconds(), mib(sent), cpu.Seconds(), refused)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rssUnderBodies runs one measurement and returns the peak RSS, the bytes sent, the RSS
// before the attack, the time and CPU time the picker took to become ready (with
// --heap-pretouch, mostly the pre-touch's), its CPU time during the attack and the refusals it
// counted.
func rssUnderBodies(t *testing.T, bin string, streams int, hold time.Duration) (peak, sent, idle int64, ready, startCPU, cpu time.Duration, refused string) {
	t.Helper()
	cmd, gp, mp, ready := startPicker(t, bin)
	defer func() {
		_ = cmd.Process.Kill()
		<-cmd.done
	}()
	idle = procStatus(t, cmd.Process.Pid, "VmRSS")
	cpu0 := procCPU(t, cmd.Process.Pid)

	const conns, bodySize, chunk = 4, 15 << 20, 1 << 20
	var clients []extprocv3.ExternalProcessorClient
	for range conns {
		cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", gp), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		clients = append(clients, extprocv3.NewExternalProcessorClient(cc))
	}
	data := bytes.Repeat([]byte("x"), chunk)
	hdrs := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")},
			{Key: "content-length", RawValue: []byte(strconv.Itoa(bodySize))}}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), hold)
	defer cancel()
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			st, err := clients[i%conns].Process(ctx)
			if err != nil || st.Send(hdrs) != nil {
				return
			}
			for off := 0; off+chunk < bodySize; off += chunk {
				if st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
					RequestBody: &extprocv3.HttpBody{Body: data}}}) != nil {
					return
				}
				total.Add(chunk)
			}
			<-ctx.Done()
		})
	}
	wg.Wait()
	return procStatus(t, cmd.Process.Pid, "VmHWM"), total.Load(), idle, ready, cpu0, procCPU(t, cmd.Process.Pid) - cpu0, overloads(t, mp)
}

// pickerProc is a started picker process; done is closed when it has exited.
type pickerProc struct {
	*exec.Cmd
	done chan struct{}
}

// startPicker starts bin on ports free a moment before (the picker takes no port 0 for
// them; internal/testnet's held ports cannot be handed to another process, whose bind of
// one fails), and waits until its /readyz answers. A port taken in that moment by a test
// running beside this one makes the picker exit with EADDRINUSE; it is then started again
// on new ports. It returns the process, its ext_proc and metrics ports and the time it took
// to become ready.
func startPicker(t *testing.T, bin string) (p pickerProc, grpcPort, metricsPort int, ready time.Duration) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		gp, mp := freePort(t), freePort(t)
		args := []string{"--bind-address", "127.0.0.1", "--grpc-port", fmt.Sprint(gp), "--grpc-health-port", "0",
			"--metrics-port", fmt.Sprint(mp), "--endpoints", "127.0.0.1:1", "--secure-serving=false",
			"--lmcache-pull-port", "0", "--lmcache-reply-port", "0", "--health-check-interval", "0"}
		args = append(args, strings.Fields(os.Getenv("LOADAWARE_RSS_FLAGS"))...)
		p = pickerProc{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
		stderr := &testlog.Buffer{}
		p.Stderr = stderr
		begin := time.Now()
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = p.Wait()
			close(p.done)
		}()
		// A pre-touched heap is written before the picker listens: seconds on a loaded host.
		err := waitReady(mp, p.done, begin.Add(60*time.Second))
		switch {
		case err == nil:
			return p, gp, mp, time.Since(begin)
		case attempt < 5 && strings.Contains(strings.ToLower(stderr.String()), "address already in use"):
			t.Logf("start %d: a port was taken before the picker bound it; again on new ports", attempt)
		default:
			_ = p.Process.Kill()
			<-p.done
			t.Fatalf("%v; log:\n%s", err, stderr.String())
		}
	}
}

// waitReady polls the picker's /readyz on port mp until it answers 200 (nil), exited is
// closed (the process ended; nil: a picker in this process, which does not exit by itself)
// or the deadline passes (an error saying which).
func waitReady(mp int, exited <-chan struct{}, deadline time.Time) error {
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", mp))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("the picker exited before it was ready")
		case <-time.After(20 * time.Millisecond): // a separate server's readiness: no signal to await
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready by the deadline: %v", err)
		}
	}
}

// procCPU is the user and system CPU time process pid has used (/proc/pid/stat fields 14
// and 15, in clock ticks of 1/100 s, Linux's USER_HZ).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// overloads is the picker's non-zero loadaware_extproc_overload_total series, by reason
// ("reason=count ..."), from its /metrics on port mp.
func overloads(t *testing.T, mp int) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", mp))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `loadaware_extproc_overload_total{reason="`)
		if !ok {
			continue
		}
		if reason, n, ok := strings.Cut(rest, `"} `); ok && n != "0" {
			out = append(out, reason+"="+n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// procStatus reads a kB field of /proc/pid/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
