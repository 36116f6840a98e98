package testnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// taken checks that addr refuses connections and that no listener can bind it.
func taken(t *testing.T, addr string) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); !errors.Is(err, syscall.EADDRINUSE) {
		if l != nil {
			l.Close()
		}
		t.Errorf("listen on %s: %v, want address already in use", addr, err)
	}
}

func TestRefusedAddrRefusesAndCannotBeTaken(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		addr := RefusedAddr(t)
		if !strings.HasPrefix(addr, "127.0.0.1:") || seen[addr] {
			t.Fatalf("RefusedAddr = %q after %v: want a new 127.0.0.1 address", addr, seen)
		}
		seen[addr] = true
		taken(t, addr)
	}
}

// TestListenKeepsAKilledServersPort: a server on Listen serves; once it is closed (after
// connections of its own, which leave sockets in TIME_WAIT on the port), its port refuses
// connections and cannot be bound.
func TestListenKeepsAKilledServersPort(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "127.77.3.9"} {
		t.Run(host, func(t *testing.T) {
			l := Listen(t, host)
			addr := l.Addr().String()
			if h, _, _ := net.SplitHostPort(addr); h != host {
				t.Fatalf("Listen(%q) is on %s", host, addr)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
				ReadHeaderTimeout: 5 * time.Second}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(l) }()
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for range 3 {
				resp, err := hc.Get("http://" + addr + "/")
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != "ok" {
					t.Fatalf("served %q, %v; want ok", b, err)
				}
			}
			if l2, err := net.Listen("tcp", addr); err == nil {
				l2.Close()
				t.Fatal("another listener bound the port of a serving one")
			}
			if err := srv.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("Serve = %v", err)
			}
			taken(t, addr)
		})
	}
}

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestListenNamesABadHost(t *testing.T) {
	for _, host := range []string{"10.0.0.1", "::1", "localhost", ""} {
		t.Run(host, func(t *testing.T) {
			f := &fatalTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				l := Listen(f, host)
				l.Close()
			}()
			<-done
			if !strings.Contains(f.msg, fmt.Sprintf("%q", host)) || !strings.Contains(f.msg, "127.0.0.1") {
				t.Errorf("Listen(%q) failed with %q, want the host named and an example of a good one", host, f.msg)
			}
		})
	}
}
