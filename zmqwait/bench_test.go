package zmqwait

import (
	"io"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// BenchmarkPingWhileReceiving measures what a goroutine waiting for ZeroMQ messages costs
// the rest of a one-CPU process (GOMAXPROCS 1): the round trip of an 8-byte echo over
// loopback TCP inside the process, while another goroutine receives a message every 2 ms
// or 20 ms (a busy and a quiet engine) from a PUSH socket of another ZeroMQ context. "blocking" receives with
// RecvMessageBytes(0), a cgo call that holds the only P each time it goes back to waiting
// until sysmon retakes it; "netpoll" receives with DONTWAIT and waits on a Waiter. An op is
// one round trip after a 200 µs pause (a server between requests, so the receiver's
// returns to waiting fall both between and during round trips). ns/op is the mean round
// trip, p50-us, p99-us and max-us its quantiles, messages the messages received.
func BenchmarkPingWhileReceiving(b *testing.B) {
	for _, every := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond} {
		for _, mode := range []struct {
			name    string
			netpoll bool
		}{
			{"blocking", false},
			{"netpoll", true},
		} {
			b.Run("every="+every.String()+"/"+mode.name, func(b *testing.B) {
				pingWhileReceiving(b, every, mode.netpoll)
			})
		}
	}
}

// pingWhileReceiving is one arm of BenchmarkPingWhileReceiving.
func pingWhileReceiving(b *testing.B, every time.Duration, netpoll bool) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	pull, stopReceiver, received := startReceiver(b, netpoll)
	addr, err := pull.GetLastEndpoint()
	if err != nil {
		b.Fatal(err)
	}
	stopSender := startSender(b, addr, every)
	<-received // the first message: connected
	conn, stopEcho := startEcho(b)

	buf := make([]byte, 8)
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		time.Sleep(200 * time.Microsecond)
		t0 := time.Now()
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	stopSender()
	n := stopReceiver()
	stopEcho()

	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(float64(sum)/float64(len(lat)), "ns/op")
	b.ReportMetric(us(lat[len(lat)/2]), "p50-us")
	b.ReportMetric(us(lat[len(lat)*99/100]), "p99-us")
	b.ReportMetric(us(lat[len(lat)-1]), "max-us")
	b.ReportMetric(float64(n), "messages")
}

// startReceiver binds a PULL socket on loopback and receives from it in a goroutine, with
// blocking receives or, with netpoll, DONTWAIT receives and a Waiter. received is closed
// at the first message; stop ends the goroutine and reports the messages received.
func startReceiver(b *testing.B, netpoll bool) (pull *zmq.Socket, stop func() int, received <-chan struct{}) {
	zctx, err := zmq.NewContext()
	if err != nil {
		b.Fatal(err)
	}
	if pull, err = zctx.NewSocket(zmq.PULL); err != nil {
		b.Fatal(err)
	}
	if err := pull.SetLinger(0); err != nil {
		b.Fatal(err)
	}
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	var w *Waiter
	if netpoll {
		if w, err = New(pull); err != nil {
			b.Fatal(err)
		}
	}
	first := make(chan struct{})
	count := make(chan int, 1)
	go func() {
		defer pull.Close()
		n := 0
		defer func() { count <- n }()
		for {
			var err error
			if w == nil {
				_, err = pull.RecvMessageBytes(0)
			} else {
				err = receiveNetpoll(pull, w)
			}
			if err != nil {
				return
			}
			if n++; n == 1 {
				close(first)
			}
		}
	}()
	return pull, func() int {
		if w != nil {
			w.Close() // ends a Wait with ErrClosed
		}
		if err := zctx.Term(); err != nil { // ends a blocking receive with ETERM; returns once the socket is closed
			b.Error(err)
		}
		return <-count
	}, first
}

// receiveNetpoll receives one message the way the package is meant to be used.
func receiveNetpoll(so *zmq.Socket, w *Waiter) error {
	return w.Receive(time.Time{}, func(f zmq.Flag) error {
		_, err := so.RecvMessageBytes(f)
		return err
	})
}

// startSender pushes a message to addr every period, from a context of its own, until
// stop.
func startSender(b *testing.B, addr string, period time.Duration) (stop func()) {
	zctx, err := zmq.NewContext()
	if err != nil {
		b.Fatal(err)
	}
	push, err := zctx.NewSocket(zmq.PUSH)
	if err != nil {
		b.Fatal(err)
	}
	if err := push.SetLinger(0); err != nil {
		b.Fatal(err)
	}
	if err := push.Connect(addr); err != nil {
		b.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer push.Close()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if _, err := push.SendBytes([]byte("x"), zmq.DONTWAIT); err != nil && !IsAgain(err) {
					b.Error(err)
					return
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		if err := zctx.Term(); err != nil {
			b.Error(err)
		}
	}
}

// startEcho serves an echo on loopback TCP and returns a connection to it.
func startEcho(b *testing.B) (conn net.Conn, stop func()) {
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
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	if conn, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		b.Fatal(err)
	}
	return conn, func() {
		conn.Close()
		ln.Close()
		<-done
	}
}
