package h2gate

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// echoCounter receives until the client ends, telling the gate of each message, and
// reports how many it received on got.
type echoCounter struct {
	extprocv3.UnimplementedExternalProcessorServer
	g   *Gate
	got chan int
}

func (e *echoCounter) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	n := 0
	defer func() { e.got <- n }()
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		n++
		e.g.Received(srv.Context(), proto.Size(req))
	}
}

// TestGRPCRefusesBeforeTheWindowOpens runs a real grpc-go server behind the gate with a
// 64 KiB static window and a 1 MiB message: within the budget it is received and given
// back; over it, the stream fails with ResourceExhausted and the server has read no more
// than the window, where without the gate grpc-go would open the window to the message.
func TestGRPCRefusesBeforeTheWindowOpens(t *testing.T) {
	const window = 64 << 10
	body := make([]byte, 1<<20)
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body}}}
	cases := []struct {
		name     string
		budget   int64
		gated    bool
		code     codes.Code
		received int
		minRead  int64 // the server reads at least ...
		maxRead  int64 // ... and at most this many bytes
	}{
		{name: "within the budget", budget: 2 << 20, gated: true, code: codes.OK, received: 1, minRead: 1 << 20, maxRead: 2 << 20},
		{name: "over the budget", budget: 512 << 10, gated: true, code: codes.ResourceExhausted, maxRead: 3 * window},
		{name: "over the budget, no gate", budget: 512 << 10, code: codes.OK, received: 1, minRead: 1 << 20, maxRead: 2 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b budget
			b.max.Store(tc.budget)
			g := New(b.config(window, 4<<20))
			opts := []grpc.ServerOption{grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window)}
			if tc.gated {
				opts = append(opts, grpc.Creds(g.Creds(insecure.NewCredentials())))
			}
			srv := grpc.NewServer(opts...)
			e := &echoCounter{g: g, got: make(chan int, 1)}
			extprocv3.RegisterExternalProcessorServer(srv, e)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var read atomic.Int64
			go func() { _ = srv.Serve(countingListener{Listener: l, read: &read}) }()
			defer srv.Stop()
			cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			stream, err := extprocv3.NewExternalProcessorClient(cc).Process(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_ = stream.Send(req)
			_ = stream.CloseSend()
			_, err = stream.Recv()
			if c := status.Code(err); c != tc.code && !(tc.code == codes.OK && errors.Is(err, io.EOF)) {
				t.Fatalf("the stream ended with %v, want %v", err, tc.code)
			}
			if got := <-e.got; got != tc.received {
				t.Errorf("the handler received %d messages, want %d", got, tc.received)
			}
			if r := read.Load(); r < tc.minRead || r > tc.maxRead {
				t.Errorf("the server read %d bytes, want %d to %d", r, tc.minRead, tc.maxRead)
			}
			if u := b.used.Load(); u != 0 {
				t.Errorf("taken %d at the end, want 0", u)
			}
		})
	}
}
