package lmcache

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
	"golang.org/x/sys/unix"
)

// DefaultMaxPeerConns is how many connections one peer IP may hold to each controller
// socket. An LMCache worker holds one a socket, and an engine pod runs one worker per
// tensor-parallel rank on it: 8 on a node of 8 GPUs. Each connection is a queue of its own
// in libzmq ((RcvHWM + 1) x MaxFrameBytes of one-frame messages), and libzmq has no cap of
// its own (decision 1177).
const DefaultMaxPeerConns = 8

// peerConns counts one socket's open connections by peer IP, from the socket's monitor
// events. It is owned by the ZAP handler's goroutine (serveZAP), the only reader of the
// monitors.
type peerConns struct {
	max  int
	byFD map[int]string // an accepted connection's descriptor -> its peer IP
	byIP map[string]int
}

func newPeerConns(max int) *peerConns {
	return &peerConns{max: max, byFD: map[int]string{}, byIP: map[string]int{}}
}

// open records an accepted connection and reports whether its IP now holds more than max.
func (c *peerConns) open(fd int, ip string) (over bool) {
	c.close(fd) // a close not seen (not expected: a socket's events are ordered)
	c.byFD[fd] = ip
	c.byIP[ip]++
	return c.over(ip)
}

// over reports whether ip holds more than max connections.
func (c *peerConns) over(ip string) bool { return c.byIP[ip] > c.max }

// close forgets a connection's descriptor; an unknown one is ignored.
func (c *peerConns) close(fd int) {
	ip, ok := c.byFD[fd]
	if !ok {
		return
	}
	delete(c.byFD, fd)
	if c.byIP[ip]--; c.byIP[ip] <= 0 {
		delete(c.byIP, ip)
	}
}

// connPeerIP returns the peer IP of the TCP connection on descriptor fd, after checking that
// its local port is the listener's: the descriptor of an accepted connection named by a
// monitor event may have been closed and reused since, and a reuse by anything but this
// listener must not be touched.
func connPeerIP(fd, port int) (string, error) {
	local, err := unix.Getsockname(fd)
	if err != nil {
		return "", err
	}
	var lport int
	switch a := local.(type) {
	case *unix.SockaddrInet4:
		lport = a.Port
	case *unix.SockaddrInet6:
		lport = a.Port
	default:
		return "", errors.New("not a TCP connection")
	}
	if lport != port {
		return "", fmt.Errorf("local port %d is not the listener's %d", lport, port)
	}
	peer, err := unix.Getpeername(fd)
	if err != nil {
		return "", err
	}
	switch a := peer.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr).String(), nil
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap().String(), nil
	}
	return "", errors.New("not a TCP connection")
}

// monitor is a socket's monitor: its events, and the socket's connections counted from them.
type monitor struct {
	so    *zmq.Socket
	what  string // the socket's name: pull, reply, heartbeat
	port  int    // the socket's listening port
	conns *peerConns
}

// drainMonitor applies every event m has queued: an accepted connection is counted, and one
// past MaxPeerConns of its IP is shut (both ways: the peer sees its end at once, and libzmq
// reads its end, closes it and drops what it had read of it; the peer's socket connects again
// later, and is ended again while the IP holds its connections); a closed one is forgotten.
// A write libzmq makes to it after the shutdown fails with EPIPE, which it handles as a
// peer's disconnection. It returns the error that stopped it, nil when the queue is empty.
func (s *Server) drainMonitor(m *monitor) error {
	// Reading ZMQ_EVENTS processes the socket's pending commands, which a DONTWAIT receive
	// may leave for later (libzmq throttles them): an event already sent is then seen.
	if _, err := m.so.GetEvents(); err != nil {
		return err
	}
	for {
		ev, _, fd, err := m.so.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			if zmqwait.IsAgain(err) {
				return nil
			}
			return err
		}
		s.applyEvent(m, ev, fd)
	}
}

func (s *Server) applyEvent(m *monitor, ev zmq.Event, fd int) {
	switch ev {
	case zmq.EVENT_ACCEPTED:
		ip, err := connPeerIP(fd, m.port)
		if err != nil {
			return // closed (and maybe reused) before this event was read
		}
		if m.conns.open(fd, ip) {
			if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
				return
			}
			s.noteConnRefused(m.what, ip, m.conns.max)
		}
	case zmq.EVENT_DISCONNECTED:
		m.conns.close(fd)
	}
}

// noteConnRefused counts a connection ended for its IP's cap and logs it at WARN, at most once
// a minute per socket and IP.
func (s *Server) noteConnRefused(what, ip string, held int) {
	s.connsRefused.Inc()
	if n, logIt := s.connLog.Due(what+"|"+ip, time.Now()); logIt {
		s.log.Warn("lmcache: ended a connection from a peer IP that already holds the most connections to this socket (each can make libzmq hold a queue of messages; an LMCache worker needs one); if it is an engine running more LMCache workers than that (one a tensor-parallel rank), raise --lmcache-max-peer-conns (logged once a minute per peer and socket; see loadaware_lmcache_peer_conns_refused_total)",
			"peer", ip, "socket", what, "held", held, "refused", n, "max_peer_conns", s.cfg.MaxPeerConns)
	}
}
