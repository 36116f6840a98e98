// Package lmworker is the socket of an engine's LMCache worker in the benchmarks: a ZeroMQ
// PUSH socket connected from the engine's IP to the picker's LMCache pull address, so the
// controller sees that IP as the peer (as it admits peers by the fleet's IPs). Sending,
// batching and pacing are the caller's.
package lmworker

import (
	"errors"
	"fmt"
	"net/netip"

	zmq "github.com/pebbe/zmq4"
)

// Dial connects a PUSH socket, in a ZeroMQ context of its own, from ip to pullAddr
// (host:port), with linger 0 so that closing it drops what it still queues. ip must be a
// local address; in the benchmarks it is one of 127.0.0.0/8, all local on Linux. The caller
// owns both and closes the socket, then terminates the context.
func Dial(ip, pullAddr string) (*zmq.Context, *zmq.Socket, error) {
	if a, err := netip.ParseAddr(ip); err != nil || !a.Is4() || !a.IsLoopback() {
		return nil, nil, fmt.Errorf("lmworker: the worker's address %q is not in 127.0.0.0/8: it connects from the engine's IP, which must be local (ZeroMQ would only fail later, in the background)", ip)
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		return nil, nil, fmt.Errorf("lmworker: zeromq context: %w", err)
	}
	sock, err := zctx.NewSocket(zmq.PUSH)
	if err == nil {
		err = sock.SetLinger(0)
		if err == nil {
			err = sock.Connect(fmt.Sprintf("tcp://%s:0;%s", ip, pullAddr))
		}
		if err != nil {
			err = errors.Join(err, sock.Close())
		}
	}
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("lmworker: the LMCache PUSH socket from %s to %s: %w", ip, pullAddr, err), zctx.Term())
	}
	return zctx, sock, nil
}
