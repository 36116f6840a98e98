package extload

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/internal/zmqtest"
	"github.com/loadaware/loadaware-epp/lmcache"
)

func TestParseListening(t *testing.T) {
	for _, tc := range []struct {
		line, addr string
		attrs      map[string]string
		err        string
	}{
		{line: "listening 127.0.0.1:1\n", addr: "127.0.0.1:1", attrs: map[string]string{}},
		{line: "listening 127.0.0.1:1 lmcache=127.0.0.1:2 metrics=127.0.0.1:3\n", addr: "127.0.0.1:1",
			attrs: map[string]string{"lmcache": "127.0.0.1:2", "metrics": "127.0.0.1:3"}},
		{line: "ready\n", err: `said "ready" instead of its address`},
		{line: "listening \n", err: "instead of its address"},
		{line: "listening 127.0.0.1:1 lmcache\n", err: `"lmcache" after its address is not NAME=VALUE`},
		{line: "listening 127.0.0.1:1 =x\n", err: "not NAME=VALUE"},
	} {
		addr, attrs, err := parseListening(tc.line)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || addr != tc.addr || !maps.Equal(attrs, tc.attrs) {
			t.Errorf("%q: %q %v %v, want %q %v", tc.line, addr, attrs, err, tc.addr, tc.attrs)
		}
	}
}

func TestFeederRegistersThenPushesBatchesOfNewKeys(t *testing.T) {
	pull, addr := zmqtest.Pull(t)
	f, err := NewFeeder("127.0.0.1", addr, "engine-a", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		n   FeedCounts
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := f.Feed(ctx, 2000, 3)
		done <- result{n, err}
	}()
	// The first message is the registration, alone; then batches of three admits.
	frames, md, err := pull.RecvMessageBytesWithMetadata(0, "Peer-Address")
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 || md["Peer-Address"] != "127.0.0.1" {
		t.Fatalf("first message: %d frames from %q", len(frames), md["Peer-Address"])
	}
	if m, err := lmcache.Decode(frames[0]); err != nil || m.Tag() != "RegisterMsg" || m.(lmcache.RegisterMsg).InstanceID != "engine-a" || m.(lmcache.RegisterMsg).IP != "127.0.0.1" {
		t.Fatalf("first message %#v, %v: want engine-a's RegisterMsg", m, err)
	}
	keys := map[int64]bool{}
	const batches = 5
	for range batches {
		frames, err := pull.RecvMessageBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != 3 {
			t.Fatalf("a batch of %d frames, want 3", len(frames))
		}
		for _, fr := range frames {
			m, err := lmcache.Decode(fr)
			if err != nil {
				t.Fatal(err)
			}
			a, ok := m.(lmcache.KVAdmitMsg)
			if !ok || a.InstanceID != "engine-a" {
				t.Fatalf("%#v: want engine-a's KVAdmitMsg", m)
			}
			keys[a.Key] = true
		}
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(keys) != 3*batches {
		t.Errorf("%d distinct keys in %d events: the feeder must admit new keys", len(keys), 3*batches)
	}
	if r.n.Batches < batches || r.n.Events != 3*r.n.Batches {
		t.Errorf("counts %+v after %d batches were received", r.n, batches)
	}
}

func TestFeederRefusesBadArguments(t *testing.T) {
	_, addr := zmqtest.Pull(t)
	if _, err := NewFeeder("192.0.2.1", addr, "x", 1); err == nil || !strings.Contains(err.Error(), "127.0.0.0/8") {
		t.Errorf("a non-local source address: %v, want an error naming loopback", err)
	}
	f, err := NewFeeder("127.0.0.1", addr, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		rate   float64
		events int
	}{{0, 7}, {-1, 7}, {10, 0}, {10, 51}} {
		if _, err := f.Feed(context.Background(), tc.rate, tc.events); err == nil || !strings.Contains(err.Error(), "1 to 50 events") {
			t.Errorf("Feed(%v, %d): %v, want an error saying what to pass", tc.rate, tc.events, err)
		}
	}
}

// FuzzParseListening: any line is either refused or read into an address and fields that,
// written back as a listening line, read the same again.
func FuzzParseListening(f *testing.F) {
	for _, s := range []string{"listening 127.0.0.1:1\n", "listening a b=c d=e", "listening", "listening a =", "listening a b==c", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		addr, attrs, err := parseListening(line)
		if err != nil {
			return
		}
		if addr == "" || strings.ContainsAny(addr, " \t\n") {
			t.Fatalf("%q: address %q", line, addr)
		}
		again := "listening " + addr
		for k, v := range attrs {
			if k == "" || v == "" || strings.Contains(k, "=") {
				t.Fatalf("%q: field %q=%q", line, k, v)
			}
			again += " " + k + "=" + v
		}
		addr2, attrs2, err := parseListening(again)
		if err != nil || addr2 != addr || !maps.Equal(attrs, attrs2) {
			t.Fatalf("%q read as %q %v; written back as %q it reads %q %v %v", line, addr, attrs, again, addr2, attrs2, err)
		}
	})
}

// TestServeFeedFeedsBetweenStartAndStop drives the feeder's process protocol over pipes:
// nothing is pushed before "start"; between "start" and "stop" batches arrive, and "stop"
// answers with their counts; a request out of turn ends the protocol with an error.
func TestServeFeedFeedsBetweenStartAndStop(t *testing.T) {
	pull, addr := zmqtest.Pull(t)
	f, err := NewFeeder("127.0.0.1", addr, "engine-a", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveFeed(context.Background(), f, 2000, 2, inR, outW); outW.Close() }()
	out := bufio.NewReader(outR)
	ask := func(req string) string {
		t.Helper()
		if _, err := io.WriteString(inW, req+"\n"); err != nil {
			t.Fatal(err)
		}
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("no answer to %q: %v", req, err)
		}
		return strings.TrimSpace(l)
	}
	if l, _ := out.ReadString('\n'); l != "listening feeder\n" {
		t.Fatalf("first line %q, want the listening line", l)
	}
	// The registration is queued before start; no batch follows it until start.
	if frames, err := pull.RecvMessageBytes(0); err != nil || len(frames) != 1 {
		t.Fatalf("the registration: %d frames, %v", len(frames), err)
	}
	if err := pull.SetRcvtimeo(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if frames, err := pull.RecvMessageBytes(0); err == nil {
		t.Fatalf("a message of %d frames before start", len(frames))
	}
	if l := ask("start"); l != "started" {
		t.Fatalf("start answered %q", l)
	}
	if err := pull.SetRcvtimeo(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	const want = 3
	for range want {
		if frames, err := pull.RecvMessageBytes(0); err != nil || len(frames) != 2 {
			t.Fatalf("a batch while started: %d frames, %v", len(frames), err)
		}
	}
	n, cpu, err := parseFed(ask("stop"))
	if err != nil || n.Batches < want || n.Events != 2*n.Batches || n.Dropped != 0 || cpu <= 0 {
		t.Fatalf("stop: %+v, CPU %v, %v after %d batches were received", n, cpu, err, want)
	}
	if l := ask("start"); l != "started" {
		t.Fatalf("a second start answered %q", l)
	}
	if _, err := io.WriteString(inW, "start\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), `request "start" out of turn`) {
		t.Errorf("a start while started: %v, want an error naming the request", err)
	}
	inW.Close()
}

func TestParseFed(t *testing.T) {
	for _, tc := range []struct {
		line string
		want FeedCounts
		cpu  time.Duration
		err  string
	}{
		{line: "fed 3 21 1 cpu 5000", want: FeedCounts{Batches: 3, Events: 21, Dropped: 1}, cpu: 5 * time.Microsecond},
		{line: "fed 0 0 0 cpu 0"},
		{line: "feed-error push a batch: boom", err: "the LMCache feeder's process: push a batch: boom"},
		{line: "fed 3 21 1", err: `answered "fed 3 21 1" to stop`},
		{line: "fed -1 0 0 cpu 1", err: "answered"},
		{line: "fed 1 2 3 cpu -1", err: "answered"},
		{line: "fed 1 2 3 cpu 4 5", err: "answered"},
		{line: "started", err: "answered"},
	} {
		n, cpu, err := parseFed(tc.line)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %+v %v, want an error saying %q", tc.line, n, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.want || cpu != tc.cpu {
			t.Errorf("%q: %+v %v %v, want %+v %v", tc.line, n, cpu, err, tc.want, tc.cpu)
		}
	}
}

// FuzzParseFed: any line is refused or read into counts that, written back, read the same.
func FuzzParseFed(f *testing.F) {
	for _, s := range []string{"fed 1 2 3 cpu 4", "fed 0 0 0 cpu 0", "feed-error x", "fed 1 2 3", "fed  1 2 3 cpu 4", "fed 01 2 3 cpu 4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		n, cpu, err := parseFed(line)
		if err != nil {
			return
		}
		if n.Batches < 0 || n.Events < 0 || n.Dropped < 0 || cpu < 0 {
			t.Fatalf("%q: negative counts %+v or CPU %v", line, n, cpu)
		}
		again := fmt.Sprintf(fedFormat, n.Batches, n.Events, n.Dropped, cpu.Nanoseconds())
		if again != line {
			t.Fatalf("%q read as %+v, which writes back as %q", line, n, again)
		}
	})
}
