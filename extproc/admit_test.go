package extproc

import (
	"context"
	"slices"
	"sync"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/grpcbuf"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
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

// TestReceivedTellsTheWireLengthOfBodies: the Received hook is told the wire length of
// each request and response body message as it arrives, and of nothing else, under gRPC's
// codec (proto.Size of what was decoded) and under grpcbuf's (the length decoded).
func TestReceivedTellsTheWireLengthOfBodies(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"codec=grpc", nil}, {"codec=grpcbuf", grpcbuf.ServerOptions()}} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []int
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000"}, mode: FullDuplex, grpcOpts: c.opts, cfg: Config{Received: func(_ context.Context, n int) {
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
		})
	}
}

// TestWireSizeIsTheLengthDecoded: a message decoded from its bytes tells their length,
// also where protobuf's canonical encoding of it is shorter (a default value sent, which
// the gate took in the message's prefix); decoded by a codec without aliasing, it tells
// proto.Size; released, it tells nothing stale.
func TestWireSizeIsTheLengthDecoded(t *testing.T) {
	canonical, err := proto.Marshal(body(completion, true))
	if err != nil {
		t.Fatal(err)
	}
	// request_body (4) holding body (1), end_of_stream (2) and end_of_stream again as
	// false: a later value wins, so the message is a body whose end_of_stream is false.
	inner := protowire.AppendTag(nil, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, completion)
	inner = protowire.AppendTag(inner, 2, protowire.VarintType)
	inner = protowire.AppendVarint(inner, 0)
	padded := protowire.AppendTag(nil, 4, protowire.BytesType)
	padded = protowire.AppendBytes(padded, inner)
	for _, c := range []struct {
		name string
		b    []byte
	}{{"canonical", canonical}, {"a default value sent", padded}} {
		var r received
		if err := r.UnmarshalAliasing(mem.SliceBuffer(c.b)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := r.wireSize(); got != len(c.b) {
			t.Errorf("%s: wireSize %d, want the %d bytes decoded (proto.Size %d)", c.name, got, len(c.b), proto.Size(r.ProcessingRequest))
		}
		r.release()
		if err := proto.Unmarshal(c.b, &r); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, want := r.wireSize(), proto.Size(r.ProcessingRequest); got != want {
			t.Errorf("%s: decoded by protobuf, wireSize %d, want proto.Size %d", c.name, got, want)
		}
		r.release()
	}
	if len(padded) == proto.Size(body(completion, false)) {
		t.Fatal("the padded message is canonical: the test shows nothing")
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
