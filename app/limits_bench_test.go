package app

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// BenchmarkPerIPRefusal is the `conns` hostile client's refused connection (bench/soak):
// a client IP already at its per-IP cap dials again and reads until the picker closes the
// connection. cpu-ns/op is the process's CPU (both ends, and the kernel's loopback work
// charged to them) per refused connection.
func BenchmarkPerIPRefusal(b *testing.B) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})
	l := limitListener(inner, 0, 1, refused)
	defer l.Close()
	go func() { // the server's accept loop; the admitted connection is held open
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	held, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer held.Close()
	buf := make([]byte, 1)
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		c, err := net.Dial("tcp", inner.Addr().String())
		if errors.Is(err, syscall.ECONNRESET) { // reset before the dial returned
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err == nil {
			b.Fatal("a connection over the per-IP cap was served")
		}
		c.Close()
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if got := testutil.ToFloat64(refused); got < float64(b.N) {
		b.Fatalf("%v refusals counted for %d connections", got, b.N)
	}
}

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
