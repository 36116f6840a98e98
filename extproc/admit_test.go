package extproc

import (
	"context"
	"net"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestAdmitBoundsTheTransportStreams: with Admit as the transport's tap, MaxStreams +
// TransportSlack streams are let in (those over MaxStreams to be answered 503 at their
// headers), one more is refused before any of its messages is read, and a place that
// frees up is taken again.
func TestAdmitBoundsTheTransportStreams(t *testing.T) {
	f := fleet.New()
	f.Update([]string{"10.0.0.1:8000"})
	p, err := picker.New(picker.Options{Fleet: f, Policy: "leastload"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(p, Config{Limits: Limits{MaxStreams: 1}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, TransportSlack+2)
	s.streamDone = func() { done <- struct{}{} }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.InTapHandle(s.Admit))
	extprocv3.RegisterExternalProcessorServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := extprocv3.NewExternalProcessorClient(conn)
	open := func() (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		st, err := c.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st, cancel
	}
	// The first stream takes the one place; it is told when its request headers arrive.
	first, cancelFirst := open()
	if err := first.Send(headers(true)); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	for range TransportSlack { // silent streams: admitted, waiting for their headers
		open()
	}
	over, _ := open()
	_, err = over.Recv()
	if status.Code(err) != codes.ResourceExhausted || s.admitted.Load() != 1+TransportSlack {
		t.Fatalf("stream %d: %v with %d admitted; want ResourceExhausted with %d", TransportSlack+2, err, s.admitted.Load(), 1+TransportSlack)
	}
	cancelFirst()
	<-done
	again, _ := open()
	exchange(t, again, []*extprocv3.ProcessingRequest{postHeaders(PathCompletions)},
		[]*extprocv3.ProcessingResponse{immediateResp(typev3.StatusCode_ServiceUnavailable, "ServiceUnavailable",
			"the picker is serving its limit of 1 concurrent requests (--max-streams): retry shortly")})
}
