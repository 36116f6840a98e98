// Package zmqwait waits for a ZeroMQ socket to become readable on Go's network poller, so
// a goroutine waiting for messages holds neither a P nor a thread in cgo.
//
// A blocking receive (RecvMessage(0)) or zmq.Poller.Poll is a cgo call that keeps its P
// until sysmon retakes it, one or two sysmon ticks of up to 10 ms each: with GOMAXPROCS 1
// the whole process stalls for up to about 20 ms each time such a goroutine goes back to
// waiting. The pattern that avoids it: receive with zmq.DONTWAIT until EAGAIN, then Wait,
// then receive again; Receive does that for one message (waiting first when the last
// message came alone after a wait).
//
// The package does not receive, send or close the socket; it only waits.
package zmqwait

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
	"golang.org/x/sys/unix"
)

// ErrClosed is returned (possibly wrapped) by Wait once Close was called.
var ErrClosed = errors.New("zmqwait: waiter closed")

// Waiter waits for one socket. Wait reads the socket's ZMQ_EVENTS, and ZeroMQ sockets are
// not thread-safe, so Wait must be called only by the goroutine that owns the socket, and
// never concurrently with itself; Close may be called from any goroutine.
type Waiter struct {
	so     *zmq.Socket
	f      *os.File // a duplicate of the socket's ZMQ_FD, registered with the network poller
	rc     syscall.RawConn
	closed atomic.Bool
	ready  func(uintptr) bool // the readiness check RawConn.Read calls; sets err and parked
	err    error              // the error of GetEvents inside ready, for the Wait in progress
	parked bool               // the wait in progress found the socket not readable and waited
	woken  bool               // the wait in progress is Receive's: an edge after a park ends it
	more   bool               // Receive: the last message was queued before its wait, so try recv first

	// onPark, when set (tests only), is called each time Wait finds the socket not
	// readable, just before it waits for the descriptor.
	onPark func()
}

// New returns a Waiter for so. It duplicates the socket's ZMQ_FD and leaves the socket
// itself alone: the Waiter must be closed with Close, and closing the socket does not
// close it.
func New(so *zmq.Socket) (*Waiter, error) {
	fd, err := so.GetFd()
	if err != nil {
		return nil, fmt.Errorf("zmqwait: the socket's file descriptor (ZMQ_FD): %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("zmqwait: duplicate the socket's file descriptor (out of descriptors? raise the open files limit): %w", err)
	}
	// os.NewFile puts only a non-blocking descriptor on the network poller. libzmq makes its
	// signaler non-blocking already; were it not, os would set O_NONBLOCK itself and clear it
	// again on Close, and the flag belongs to the file description libzmq shares with the
	// duplicate. Setting it here keeps it set.
	flags, err := unix.FcntlInt(uintptr(dup), unix.F_GETFL, 0)
	if err == nil && flags&unix.O_NONBLOCK == 0 {
		err = unix.SetNonblock(dup, true)
	}
	if err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("zmqwait: make the socket's file descriptor non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(dup), "zmq-fd")
	if err := f.SetReadDeadline(time.Time{}); err != nil { // fails when f is not on the poller
		f.Close()
		return nil, fmt.Errorf("zmqwait: the socket's file descriptor cannot be put on the network poller: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("zmqwait: raw access to the socket's file descriptor: %w", err)
	}
	w := &Waiter{so: so, f: f, rc: rc}
	w.ready = func(uintptr) bool {
		if w.woken && w.parked {
			return true // Receive's wait: its recv finds out what the edge brought
		}
		ev, err := w.so.GetEvents()
		if err != nil {
			w.err = err
			return true
		}
		if ev&zmq.POLLIN != 0 {
			return true
		}
		w.parked = true
		if w.onPark != nil {
			w.onPark()
		}
		return false
	}
	return w, nil
}

// Wait returns nil once the socket has a message to receive (ZMQ_EVENTS has POLLIN),
// at once if it has one already. It returns os.ErrDeadlineExceeded when deadline passes
// first (the zero time: no deadline; a deadline already passed: Wait only checks),
// ErrClosed once Close was called (also during the wait), and the error of reading
// ZMQ_EVENTS otherwise (zmq.ETERM while the socket's context terminates).
//
// ZMQ_FD signals edges, not levels: a message queued behind the one just received does not
// signal again. Wait reads ZMQ_EVENTS after arming the poller, so it sees such a message
// and misses no edge; the caller may receive one message or all of them between Waits.
func (w *Waiter) Wait(deadline time.Time) error {
	_, err := w.wait(deadline, false)
	return err
}

// wait is Wait, and reports whether it parked. With woken (Receive's wait) it returns nil
// as soon as the descriptor signals after a park, without reading ZMQ_EVENTS again: the
// caller's receive processes the socket's commands as that read would, and finds the
// message or EAGAIN. Every park still follows a read of ZMQ_EVENTS after arming the poller,
// so no edge is lost either way.
func (w *Waiter) wait(deadline time.Time, woken bool) (parked bool, err error) {
	if w.closed.Load() {
		return false, ErrClosed
	}
	w.err, w.parked, w.woken = nil, false, woken
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		// The poller reports a passed deadline without calling ready: check once.
		ev, err := w.so.GetEvents()
		switch {
		case err != nil:
			return false, fmt.Errorf("zmqwait: socket events: %w", err)
		case ev&zmq.POLLIN != 0:
			return false, nil
		}
		return false, os.ErrDeadlineExceeded
	}
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return false, w.pollErr(err)
	}
	// RawConn.Read clears the descriptor's readiness, then calls ready, and waits for the
	// next edge only when ready returns false: an edge after the clear is never lost.
	err = w.rc.Read(w.ready)
	if w.err != nil {
		return w.parked, fmt.Errorf("zmqwait: socket events: %w", w.err)
	}
	if err != nil {
		return w.parked, w.pollErr(err)
	}
	return w.parked, nil
}

// pollErr maps an error of the poller: ErrClosed once Close was called (the poller says
// "use of closed file"), else err as is (os.ErrDeadlineExceeded).
func (w *Waiter) pollErr(err error) error {
	if w.closed.Load() {
		return ErrClosed
	}
	return err
}

// Receive calls recv with zmq.DONTWAIT until it finds a message, waiting on w whenever
// recv finds none queued (IsAgain), and returns recv's error (nil: recv has the message) or
// the error of a wait: os.ErrDeadlineExceeded at deadline (zero: none), ErrClosed, or
// zmq.ETERM. recv assigns what it received to the caller's variables. Like Wait, Receive
// must be called by the goroutine that owns the socket.
//
// It calls recv as few times as it can. A message that came after a park is, most of the
// time, the only one queued (an engine's worker pushes a batch now and then): the next
// Receive waits first rather than calling a recv that would find nothing, and after the
// park's edge it calls recv without reading ZMQ_EVENTS again. A message that was queued
// before its wait may have others behind it: the next Receive calls recv first, so a
// backlog is drained with one recv a message. Either way a recv that finds nothing (the
// edge was for another command) is followed by a wait.
func (w *Waiter) Receive(deadline time.Time, recv func(zmq.Flag) error) error {
	for {
		if w.more {
			if err := recv(zmq.DONTWAIT); !IsAgain(err) {
				return err
			}
		}
		parked, err := w.wait(deadline, true)
		if err != nil {
			w.more = false
			return err
		}
		w.more = !parked
		if err := recv(zmq.DONTWAIT); !IsAgain(err) {
			return err
		}
		w.more = false
	}
}

// IsAgain reports whether err is a DONTWAIT receive's or send's "nothing now" (EAGAIN).
func IsAgain(err error) bool { return zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) }

// Close releases the duplicate descriptor (never the socket) and wakes a Wait in
// progress, which then returns ErrClosed. It is safe to call from any goroutine, while
// Wait runs, and more than once; calls after the first return nil.
func (w *Waiter) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return nil
	}
	return w.f.Close()
}
