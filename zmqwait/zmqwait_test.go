package zmqwait

import (
	"errors"
	"os"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// long bounds every wait that must end for another reason: reaching it fails the test.
const long = 10 * time.Second

// pair returns a connected PUSH and PULL ("inproc" or "tcp" on loopback) on a context of
// their own, all closed when the test ends.
func pair(t testing.TB, transport string) (push, pull *zmq.Socket) {
	t.Helper()
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := zctx.Term(); err != nil {
			t.Errorf("terminate the context: %v", err)
		}
	})
	socket := func(kind zmq.Type) *zmq.Socket {
		so, err := zctx.NewSocket(kind)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { so.Close() })
		if err := so.SetLinger(0); err != nil {
			t.Fatal(err)
		}
		return so
	}
	pull, push = socket(zmq.PULL), socket(zmq.PUSH)
	addr := "inproc://zmqwait-test"
	if transport == "tcp" {
		addr = "tcp://127.0.0.1:0"
	}
	if err := pull.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if addr, err = pull.GetLastEndpoint(); err != nil {
		t.Fatal(err)
	}
	if err := push.Connect(addr); err != nil {
		t.Fatal(err)
	}
	return push, pull
}

func newWaiter(t *testing.T, so *zmq.Socket) *Waiter {
	t.Helper()
	w, err := New(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func send(t testing.TB, push *zmq.Socket, msg string) {
	t.Helper()
	if _, err := push.Send(msg, 0); err != nil {
		t.Fatalf("send %q: %v", msg, err)
	}
}

// queued blocks until so has a message to receive (zmq.Poller, not the package under test).
func queued(t *testing.T, so *zmq.Socket) {
	t.Helper()
	p := zmq.NewPoller()
	p.Add(so, zmq.POLLIN)
	if polled, err := p.Poll(long); err != nil || len(polled) == 0 {
		t.Fatalf("no message queued within %v: %v", long, err)
	}
}

// recvNow receives a message without waiting; "" when none is queued.
func recvNow(t *testing.T, so *zmq.Socket) string {
	t.Helper()
	msg, err := so.Recv(zmq.DONTWAIT)
	if IsAgain(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return msg
}

// parks makes w count its parks (the count is read by the goroutine calling Wait) and
// signal each on the returned channel, without blocking.
func parks(w *Waiter) (count *int, parked <-chan struct{}) {
	n, ch := new(int), make(chan struct{}, 1)
	w.onPark = func() {
		*n++
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return n, ch
}

func TestWaitReturnsOnceAMessageIsQueued(t *testing.T) {
	for _, tc := range []struct {
		name      string
		transport string
		before    bool // queued before Wait is called (Wait must not park), else sent once Wait parks
	}{
		{"a message sent while Wait waits (tcp)", "tcp", false},
		{"a message sent while Wait waits (inproc)", "inproc", false},
		{"a message queued before Wait returns at once (tcp)", "tcp", true},
		{"a message queued before Wait returns at once (inproc)", "inproc", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			push, pull := pair(t, tc.transport)
			w := newWaiter(t, pull)
			if tc.before {
				send(t, push, "m")
				queued(t, pull)
			}
			n, parked := parks(w)
			sent := make(chan error, 1)
			go func() {
				if tc.before {
					sent <- nil
					return
				}
				<-parked
				_, err := push.Send("m", 0)
				sent <- err
			}()
			if err := w.Wait(time.Now().Add(long)); err != nil {
				t.Fatalf("Wait = %v; want nil (a message is queued)", err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if tc.before && *n != 0 {
				t.Errorf("Wait parked %d times with a message queued; want 0", *n)
			}
			if msg := recvNow(t, pull); msg != "m" {
				t.Errorf("after Wait, DONTWAIT receive = %q; want %q", msg, "m")
			}
		})
	}
}

// After a receive, the messages queued behind it signal no new edge on ZMQ_FD: Wait must
// still return at once for each of them, then wait when the queue is empty.
func TestWaitSeesMessagesQueuedBehindAReceivedOne(t *testing.T) {
	push, pull := pair(t, "inproc") // an inproc send queues the message before it returns
	w := newWaiter(t, pull)
	n, _ := parks(w)
	for _, m := range []string{"a", "b", "c"} {
		send(t, push, m)
	}
	for _, want := range []string{"a", "b", "c"} {
		if err := w.Wait(time.Now().Add(long)); err != nil {
			t.Fatalf("Wait before %q = %v; want nil", want, err)
		}
		if got := recvNow(t, pull); got != want {
			t.Fatalf("receive = %q; want %q", got, want)
		}
	}
	if *n != 0 {
		t.Errorf("Wait parked %d times with messages queued; want 0", *n)
	}
	if err := w.Wait(time.Now()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Wait on the drained socket = %v; want os.ErrDeadlineExceeded", err)
	}
}

// The receiving pattern the package is for: receive with DONTWAIT until EAGAIN, then
// Wait. Every message of bursts sent while the receiver drains and waits must arrive.
func TestDrainThenWaitReceivesEveryMessage(t *testing.T) {
	for _, transport := range []string{"tcp", "inproc"} {
		t.Run(transport, func(t *testing.T) {
			push, pull := pair(t, transport)
			w := newWaiter(t, pull)
			const bursts, each = 50, 7
			next := make(chan struct{})
			sent := make(chan error, 1)
			go func() {
				defer close(sent)
				for range bursts {
					if _, ok := <-next; !ok {
						return
					}
					for range each {
						if _, err := push.Send("m", 0); err != nil {
							sent <- err
							return
						}
					}
				}
			}()
			defer close(next)
			got, asked := 0, 0
			for got < bursts*each {
				if got == asked*each {
					next <- struct{}{} // the next burst, while this side drains and waits
					asked++
				}
				msg, err := pull.Recv(zmq.DONTWAIT)
				if err == nil && msg == "m" {
					got++
					continue
				}
				if !IsAgain(err) {
					t.Fatalf("receive: %q, %v", msg, err)
				}
				if err := w.Wait(time.Now().Add(long)); err != nil {
					t.Fatalf("Wait after %d of %d messages = %v; want nil", got, bursts*each, err)
				}
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if msg := recvNow(t, pull); msg != "" {
				t.Errorf("receive after all %d = %q; want nothing queued", bursts*each, msg)
			}
		})
	}
}

func TestWaitDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued bool
		in     time.Duration // deadline from now
		want   error
		parks  bool // whether Wait may park
	}{
		{"a future deadline with nothing queued ends the wait", false, 20 * time.Millisecond, os.ErrDeadlineExceeded, true},
		{"a passed deadline with nothing queued only checks", false, -time.Second, os.ErrDeadlineExceeded, false},
		{"a passed deadline with a message queued reports it", true, -time.Second, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			push, pull := pair(t, "inproc")
			w := newWaiter(t, pull)
			n, _ := parks(w)
			if tc.queued {
				send(t, push, "m")
			}
			deadline := time.Now().Add(tc.in)
			err := w.Wait(deadline)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Wait = %v; want %v", err, tc.want)
			}
			if err != nil && time.Now().Before(deadline) {
				t.Errorf("Wait returned %v before its deadline", err)
			}
			if !tc.parks && *n != 0 {
				t.Errorf("Wait parked %d times; want 0", *n)
			}
		})
	}
}

func TestCloseWakesAWaitInProgress(t *testing.T) {
	_, pull := pair(t, "tcp")
	w := newWaiter(t, pull)
	_, parked := parks(w)
	done := make(chan error, 1)
	go func() { done <- w.Wait(time.Now().Add(long)) }()
	<-parked
	if err := w.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait woken by Close = %v; want ErrClosed", err)
	}
}

func TestCloseTwiceAndWaitAfterClose(t *testing.T) {
	_, pull := pair(t, "inproc")
	w := newWaiter(t, pull)
	if err := w.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	if err := w.Wait(time.Time{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close = %v; want ErrClosed", err)
	}
}

// Close releases the duplicate descriptor only: the socket keeps working, and a new
// Waiter can wait on it.
func TestCloseLeavesTheSocketOpen(t *testing.T) {
	push, pull := pair(t, "tcp")
	if err := newWaiter(t, pull).Close(); err != nil {
		t.Fatal(err)
	}
	w := newWaiter(t, pull)
	send(t, push, "m")
	if err := w.Wait(time.Now().Add(long)); err != nil {
		t.Fatalf("Wait with a new Waiter = %v; want nil", err)
	}
	if msg := recvNow(t, pull); msg != "m" {
		t.Fatalf("receive after the first Waiter closed = %q; want %q", msg, "m")
	}
}

func TestCloseReleasesTheDescriptor(t *testing.T) {
	_, pull := pair(t, "inproc")
	openFDs := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("cannot count open descriptors: %v", err)
		}
		return len(fds)
	}
	newWaiter(t, pull).Close() // the runtime's poller opens its own descriptors once
	before := openFDs()
	for range 20 {
		w, err := New(pull)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(); after != before {
		t.Errorf("open descriptors: %d before 20 New+Close, %d after", before, after)
	}
}

func TestTerminatingTheContextEndsAWait(t *testing.T) {
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	so, err := zctx.NewSocket(zmq.PULL)
	if err != nil {
		t.Fatal(err)
	}
	w := newWaiter(t, so)
	_, parked := parks(w)
	waited := make(chan error, 1)
	go func() {
		err := w.Wait(time.Now().Add(long))
		so.Close() // as a serving goroutine does, so that Term can return
		waited <- err
	}()
	<-parked
	termed := make(chan error, 1)
	go func() { termed <- zctx.Term() }()
	if err := <-waited; !errors.Is(err, zmq.ETERM) {
		t.Errorf("Wait while the context terminates = %v; want zmq.ETERM", err)
	}
	if err := <-termed; err != nil {
		t.Errorf("Term = %v", err)
	}
}

func TestNewOnAClosedSocket(t *testing.T) {
	_, pull := pair(t, "inproc")
	pull.Close()
	if w, err := New(pull); err == nil {
		w.Close()
		t.Fatal("New on a closed socket = nil error; want one")
	}
}

func TestReceive(t *testing.T) {
	refused := errors.New("refused by recv")
	for _, tc := range []struct {
		name     string
		queue    bool          // a message queued before Receive
		later    bool          // a message sent once Receive has parked
		deadline time.Duration // 0: none
		recvErr  error         // what recv returns instead of receiving
		want     error
		wantMsg  string
	}{
		{name: "queued", queue: true, want: nil, wantMsg: "m"},
		{name: "after a wait", later: true, want: nil, wantMsg: "m"},
		{name: "deadline", deadline: 20 * time.Millisecond, want: os.ErrDeadlineExceeded},
		{name: "recv's own error", queue: true, recvErr: refused, want: refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			push, pull := pair(t, "tcp")
			w := newWaiter(t, pull)
			_, parked := parks(w)
			if tc.queue {
				send(t, push, "m")
				queued(t, pull)
			}
			if tc.later {
				go func() {
					<-parked
					_, _ = push.Send("m", 0)
				}()
			}
			var deadline time.Time
			if tc.deadline > 0 {
				deadline = time.Now().Add(tc.deadline)
			} else if !tc.queue && !tc.later {
				t.Fatal("a case with nothing to receive needs a deadline")
			}
			var msg string
			err := w.Receive(deadline, func(f zmq.Flag) (err error) {
				if f != zmq.DONTWAIT {
					t.Errorf("recv called with flags %v, want DONTWAIT", f)
				}
				if tc.recvErr != nil {
					return tc.recvErr
				}
				msg, err = pull.Recv(f)
				return err
			})
			if !errors.Is(err, tc.want) || msg != tc.wantMsg {
				t.Fatalf("Receive = %q, %v; want %q, %v", msg, err, tc.wantMsg, tc.want)
			}
		})
	}
}

func TestReceiveEndsOnClose(t *testing.T) {
	_, pull := pair(t, "inproc")
	w := newWaiter(t, pull)
	_, parked := parks(w)
	go func() {
		<-parked
		w.Close()
	}()
	err := w.Receive(time.Time{}, func(f zmq.Flag) error {
		_, err := pull.Recv(f)
		return err
	})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after Close = %v, want ErrClosed", err)
	}
}

// Receive calls recv once per message whether messages come one at a time (each sent once
// the receiver has parked: the next Receive waits first, and recv runs once after the
// park's edge) or are queued in a backlog (recv runs before any wait, with no park). A
// recv that finds nothing is allowed only for the connection's own commands at the start.
func TestReceiveCallsRecvOnceAMessage(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name, transport string
		backlog         bool // all n queued before the first Receive, else one per park
		maxEmpty        int  // recv calls that may find nothing
	}{
		{"one at a time (tcp)", "tcp", false, 2},
		{"one at a time (inproc)", "inproc", false, 2},
		{"a backlog (inproc)", "inproc", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			push, pull := pair(t, tc.transport)
			w := newWaiter(t, pull)
			parkCount, parked := parks(w)
			sent := make(chan error, 1)
			stop := make(chan struct{})
			defer close(stop)
			if tc.backlog {
				for range n {
					send(t, push, "m")
				}
				sent <- nil
			} else {
				go func() {
					for range n {
						select {
						case <-parked:
						case <-stop:
							sent <- nil
							return
						}
						if _, err := push.Send("m", 0); err != nil {
							sent <- err
							return
						}
					}
					sent <- nil
				}()
			}
			calls, empty := 0, 0
			for i := range n {
				var msg string
				err := w.Receive(time.Now().Add(long), func(f zmq.Flag) (err error) {
					calls++
					msg, err = pull.Recv(f)
					if IsAgain(err) {
						empty++
					}
					return err
				})
				if err != nil || msg != "m" {
					t.Fatalf("Receive %d = %q, %v; want %q, nil", i, msg, err, "m")
				}
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if empty > tc.maxEmpty || calls != n+empty {
				t.Errorf("recv called %d times for %d messages, %d of them finding nothing; want at most %d finding nothing", calls, n, empty, tc.maxEmpty)
			}
			if tc.backlog && *parkCount != 0 {
				t.Errorf("Receive parked %d times with a backlog queued; want 0", *parkCount)
			}
		})
	}
}
