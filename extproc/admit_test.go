package extproc

import (
	"context"
	"slices"
	"sync"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	gs := grpc.NewServer(grpc.InTapHandle(s.Admit))
	extprocv3.RegisterExternalProcessorServer(gs, s)
	conn := serveLoopback(t, gs)
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

// TestReceivedTellsTheWireLengthOfBodies: the Received hook is told proto.Size of each
// request and response body message as it arrives, and of nothing else.
func TestReceivedTellsTheWireLengthOfBodies(t *testing.T) {
	var mu sync.Mutex
	var got []int
	h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, mode: FullDuplex, cfg: Config{Received: func(_ context.Context, n int) {
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
	}}})
	st, _ := h.route(t)
	for _, r := range []*extprocv3.ProcessingRequest{respHeaders(false), respBody("data: {}", true)} {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	want := []int{proto.Size(body(completion, true)), proto.Size(respBody("data: {}", true))}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("Received was told %v, want %v (the two body messages)", got, want)
	}
}

// TestTransportBudgetIsTheBufferedBytes: what the transport takes counts against
// --max-buffered-bytes with the bodies held, and each refusal is counted by reason.
func TestTransportBudgetIsTheBufferedBytes(t *testing.T) {
	p, err := picker.New(picker.Options{Fleet: fleet.New(), Policy: "leastload"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(p, Config{Limits: Limits{MaxBufferedBytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if !s.TakeBuffered(600) || s.TakeBuffered(401) || !s.TakeBuffered(400) {
		t.Fatal("the transport's takes are not bounded by MaxBufferedBytes 1000")
	}
	if s.bytes.take(1) {
		t.Error("a body chunk was taken past what the transport holds")
	}
	s.GiveBuffered(1000)
	if !s.bytes.take(1000) {
		t.Error("GiveBuffered did not give back")
	}
	s.TransportRefused(false)
	s.TransportRefused(true)
	s.TransportRefused(true)
	for reason, want := range map[string]float64{"transport-bytes": 1, "transport-bytes-conn": 2} {
		if n := testutil.ToFloat64(s.metrics.overload.WithLabelValues(reason)); n != want {
			t.Errorf("overload{reason=%q} %v, want %v", reason, n, want)
		}
	}
}
