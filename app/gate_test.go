package app

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/extproc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// TestTransportTakesLongMessagesFromTheBudget: with --max-buffered-bytes 1 MiB, a 1.5 MiB
// body chunk is refused at the transport (counted as transport-bytes, never received, so
// never a buffered-bytes refusal), and two 700 KiB bodies one after the other are both
// served: what the transport took for the first was given back when it was received, and
// its body when its request ended.
func TestTransportTakesLongMessagesFromTheBudget(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, Limits: extproc.Limits{MaxBufferedBytes: 1 << 20}})
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	headers := func(n int) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")},
				{Key: "content-length", RawValue: []byte(strconv.Itoa(n))}}}}}}
	}
	chunk := func(b string, eos bool) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
	}
	// request sends a completion whose prompt makes the first chunk n bytes and returns the
	// first answer's error.
	request := func(n int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := client.Process(ctx)
		if err != nil {
			return err
		}
		first := `{"model":"m","prompt":"` + strings.Repeat("x", n-len(`{"model":"m","prompt":"`))
		_ = st.Send(headers(n + 2))
		_ = st.Send(chunk(first, false))
		_ = st.Send(chunk(`"}`, true))
		_, err = st.Recv()
		_ = st.CloseSend()
		// The body is given back when the server ends the stream: wait for that end (the
		// next request would otherwise race the release).
		for err == nil {
			if _, e := st.Recv(); e != nil {
				break
			}
		}
		return err
	}
	if err := request(1536 << 10); err == nil {
		t.Fatal("a 1.5 MiB chunk over a 1 MiB budget was served")
	}
	for i := range 2 {
		if err := request(700 << 10); err != nil {
			t.Fatalf("700 KiB body %d within the 1 MiB budget: %v", i+1, err)
		}
	}
	_, metrics := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/metrics", "", "")
	for _, want := range []string{
		`loadaware_extproc_overload_total{reason="transport-bytes"} 1`,
		`loadaware_extproc_overload_total{reason="transport-bytes-conn"} 0`,
		`loadaware_extproc_overload_total{reason="buffered-bytes"} 0`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHeaderListBounded: the ext_proc server takes a stream's HTTP/2 header block of at
// most 64 KiB (grpc-go would buffer 16 MiB per connection); larger metadata is refused and a
// stream with Envoy's few headers is served.
func TestHeaderListBounded(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}})
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if dest, err := routeOnce(conn); err != nil || dest != "10.0.0.1:8000" {
		t.Fatalf("a stream with small metadata: %q, %v", dest, err)
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-big", strings.Repeat("v", 100<<10)), 5*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err == nil {
		_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/models")}}}}}})
		_, err = st.Recv()
	}
	if err == nil || ctx.Err() != nil {
		t.Fatalf("a stream with 100 KiB of metadata: %v, want refused before the deadline", err)
	}
}
