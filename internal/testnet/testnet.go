// Package testnet gives tests loopback TCP ports that no test running beside them can take.
//
// Under go test ./... the packages' tests run at once, and every one of them binds ports.
// A port a test took from a listener and closed again is free for the next bind: a parallel
// package's server can get it, and then an address the test meant to refuse connections
// answers (a CI run saw a gateway's "refused" endpoint answer HTTP/2), or an engine the test
// killed comes back as someone else's server. The ports given here stay bound for the rest
// of the test, by a socket that never listens: the kernel refuses connections to them, hands
// them to no ephemeral bind (nor as a connection's source port), and fails an explicit bind
// of them with EADDRINUSE. Only a socket with SO_REUSEPORT of the same user could join one,
// and no test or product code here sets it.
//
// It is for tests only: it reports failures through testing.TB.
package testnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// RefusedAddr returns an address on 127.0.0.1 that refuses every connection until t ends:
// a TCP socket bound to it and never listening.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	return hold(t, netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0, false)
}

// Listen returns a TCP listener on host (an IPv4 address of the loopback, such as
// "127.0.0.1" or "127.1.2.3") at a port of the kernel's choosing, whose port outlives it:
// once the listener is closed (an http.Server's Close closes it), connections to the port
// are refused and no other listener can bind it until t ends. It is for tests that kill a
// server to play an engine's death. The listener is closed when t ends, if not before.
func Listen(t testing.TB, host string) net.Listener {
	t.Helper()
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is4() || !ip.IsLoopback() {
		t.Fatalf("testnet.Listen: host %q is not an IPv4 loopback address: give one such as 127.0.0.1", host)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return reusePort(c) }}
	l, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("testnet.Listen: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	hold(t, ip, l.Addr().(*net.TCPAddr).Port, true)
	return l
}

// hold binds a socket that never listens to ip:port (port 0: one of the kernel's choosing)
// until t ends, and returns the address. With shared set, the socket joins the SO_REUSEPORT
// group of a listener of the test already bound there.
func hold(t testing.TB, ip netip.Addr, port int, shared bool) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testnet: socket: %v", err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if shared {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			t.Fatalf("testnet: SO_REUSEPORT: %v", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ip.As4(), Port: port}); err != nil {
		t.Fatalf("testnet: bind %s: %v", net.JoinHostPort(ip.String(), strconv.Itoa(port)), err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatalf("testnet: getsockname: %v", err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		t.Fatalf("testnet: the bound socket has address %T, want IPv4", sa)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(in4.Port))
}

// reusePort sets SO_REUSEPORT on a socket before its bind.
func reusePort(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_REUSEPORT: %w", serr)
	}
	return nil
}
