package extproc

import (
	"context"
	"fmt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"io"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/grpcbuf"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

var benchEndpoints = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}

// fullDuplex8KiB is BenchmarkRoundTrip's conversation: request headers + an 8 KiB
// completion body (one frame) -> routing answer + body echo, then response headers and one
// end_of_stream response chunk. request is how many of its messages make up the request
// side, after which the server has sent requestAnswers answers.
func fullDuplex8KiB() (msgs []*extprocv3.ProcessingRequest, request, requestAnswers int) {
	prompt := strings.Repeat("lorem ipsum ", 8192/12)
	body8k := `{"model":"m","prompt":"` + prompt[:8192-len(`{"model":"m","prompt":""}`)] + `"}`
	return []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(body8k, true),
		respHeaders(false), respBody("data: [DONE]\n\n", true)}, 2, 2
}

// streamedFlood is the soak's `streamed` hostile client's conversation (bench/soak): request
// headers in STREAMED body mode (routed at the headers), two short body chunks, each
// answered, and response headers ending the response.
func streamedFlood() []*extprocv3.ProcessingRequest {
	return []*extprocv3.ProcessingRequest{
		withProtocol(headers(false, ":path", PathCompletions), filterv3.ProcessingMode_STREAMED),
		body(`{"model":"m",`, false),
		body(`"prompt":"x"}`, true),
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}},
	}
}

// BenchmarkRoundTrip measures fullDuplex8KiB over loopback plaintext gRPC. It reports the
// p50 and p99 of the request-side round trip (headers sent -> routed body received) and
// cpu-ns/op, the process's CPU time (both ends) per conversation.
func BenchmarkRoundTrip(b *testing.B) {
	msgs, request, answers := fullDuplex8KiB()
	benchRoundTrip(b, harnessOpts{endpoints: benchEndpoints}, msgs, request, answers)
}

// BenchmarkRoundTripCodec measures fullDuplex8KiB as BenchmarkRoundTrip does, with gRPC's
// own proto codec and with the service's (grpcbuf.ServerOptions, whose codec lets the stream
// decode its messages in place: decision 1197).
func BenchmarkRoundTripCodec(b *testing.B) {
	msgs, request, answers := fullDuplex8KiB()
	for _, c := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"codec=grpc", nil}, {"codec=grpcbuf", grpcbuf.ServerOptions()}} {
		b.Run(c.name, func(b *testing.B) {
			benchRoundTrip(b, harnessOpts{endpoints: benchEndpoints, grpcOpts: c.opts}, msgs, request, answers)
		})
	}
}

// fullDuplexIDs is fullDuplex8KiB with extload's prompt instead of text: 1,578 token ids
// (about 8 KiB of JSON), which the stream decodes into an array of ids.
func fullDuplexIDs() (msgs []*extprocv3.ProcessingRequest, request, requestAnswers int) {
	b := []byte(`{"model":"m","prompt":[`)
	for i := range 1578 {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(1000+i*37%150000), 10)
	}
	b = append(b, "]}"...)
	return []*extprocv3.ProcessingRequest{postHeaders(PathCompletions), body(string(b), true),
		respHeaders(false), respBody("data: [DONE]\n\n", true)}, 2, 2
}

// BenchmarkRoundTripIDs measures fullDuplexIDs as BenchmarkRoundTripCodec does, with the
// service's codec: its B/op and allocs/op show whether the ids' array is allocated per
// conversation (decision 1200: the server keeps it between decisions).
func BenchmarkRoundTripIDs(b *testing.B) {
	msgs, request, answers := fullDuplexIDs()
	benchRoundTrip(b, harnessOpts{endpoints: benchEndpoints, grpcOpts: grpcbuf.ServerOptions()}, msgs, request, answers)
}

// BenchmarkRoundTripStreamed measures the soak's `streamed` conversation (streamedFlood) the
// same way: a back-to-back flood of short requests, each message answered in turn.
func BenchmarkRoundTripStreamed(b *testing.B) {
	benchRoundTrip(b, harnessOpts{endpoints: benchEndpoints}, streamedFlood(), 1, 1)
}

// BenchmarkRoundTripStreamWorkers measures both conversations with gRPC's stream workers
// off (a new goroutine per stream, its stack grown afresh; app's setting) and on
// (grpc.NumStreamWorkers at GOMAXPROCS: reused goroutines whose stacks have already grown).
// Decision 1195 measured both here and in extload and kept them off.
func BenchmarkRoundTripStreamWorkers(b *testing.B) {
	fd, fdReq, fdAns := fullDuplex8KiB()
	for _, c := range []struct {
		name         string
		msgs         []*extprocv3.ProcessingRequest
		req, answers int
	}{{"conversation=full-duplex-8KiB", fd, fdReq, fdAns}, {"conversation=streamed", streamedFlood(), 1, 1}} {
		for _, w := range []int{0, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, w), func(b *testing.B) {
				o := harnessOpts{endpoints: benchEndpoints, grpcOpts: []grpc.ServerOption{grpc.NumStreamWorkers(uint32(w))}}
				benchRoundTrip(b, o, c.msgs, c.req, c.answers)
			})
		}
	}
}

// benchRoundTrip plays msgs on one stream per iteration against a harness made with o: the
// first request messages at once, then their requestAnswers answers, then each further
// message and its answer in turn.
func benchRoundTrip(b *testing.B, o harnessOpts, msgs []*extprocv3.ProcessingRequest, request, requestAnswers int) {
	h := newHarness(b, o)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, g0 := processCPU(), goroutinesCreated()
	for i := 0; i < b.N; i++ {
		st, err := h.client.Process(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, r := range msgs[:request] {
			if err := st.Send(r); err != nil {
				b.Fatal(err)
			}
		}
		for range requestAnswers {
			if _, err := st.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		lat = append(lat, time.Since(start))
		for _, r := range msgs[request:] {
			if err := st.Send(r); err != nil {
				b.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		_ = st.CloseSend()
		<-h.done
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

// BenchmarkRoutingAnswer measures a routing answer built and encoded as grpcbuf's codec
// encodes it: by protobuf from its messages (encoding=protobuf, as before decision 1203) and
// by hand (encoding=direct, grpcbuf.Encoder).
func BenchmarkRoutingAnswer(b *testing.B) {
	d := &picker.Decision{Endpoints: []string{"127.1.0.1:8000"}, Policy: "loadaware", PinRank: 0,
		Ranked: []scoring.Ranked{{Addr: "127.1.0.1:8000", Score: 0.5, Reason: scoring.ReasonLeastLoad}, {Addr: "127.1.0.2:8000", Score: 0.25}}}
	var a routingAnswer
	benchEncodings(b, func() answerMessage { return a.build(d.Endpoints[0], "", d, false, false) }, func() {})
}

// BenchmarkBodyAnswer measures an 8 KiB request body chunk's answer encoded as grpcbuf's
// codec encodes it: by protobuf from its messages (encoding=protobuf, as before decision
// 1203) and by hand (encoding=direct, grpcbuf.Encoder).
func BenchmarkBodyAnswer(b *testing.B) {
	chunk := make([]byte, 8194)
	var a bodyAnswer
	benchEncodings(b, func() answerMessage { return a.set(true, chunk, true) }, a.forget)
}

// answerMessage is an answer that encodes itself and is a proto.Message too.
type answerMessage interface {
	grpcbuf.Encoder
	ProtoReflect() protoreflect.Message
}

// benchEncodings runs encoding=protobuf (the *ProcessingResponse, through protobuf's Size
// and Marshal) and encoding=direct (the answer's own encoding) over the answers next builds,
// calling done after each is sent.
func benchEncodings(b *testing.B, next func() answerMessage, done func()) {
	c := grpcbuf.NewCodec(&grpcbuf.Pool{})
	for _, direct := range []bool{false, true} {
		name := "encoding=protobuf"
		if direct {
			name = "encoding=direct"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a := next()
				var m any = a
				if !direct {
					m = a.ProtoReflect().Interface()
				}
				s, err := c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				s.Free()
				done()
			}
		})
	}
}

// BenchmarkProcess measures the server alone: Process on an in-memory stream that hands it
// the conversation's messages and drops its answers, with no gRPC transport or codec. Its
// allocs/op and B/op are the server's own per request, and cpu-ns/op its CPU.
func BenchmarkProcess(b *testing.B) {
	fd, _, _ := fullDuplex8KiB()
	for _, c := range []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
	}{{"conversation=full-duplex-8KiB", fd}, {"conversation=streamed", streamedFlood()}} {
		b.Run(c.name, func(b *testing.B) {
			h := newHarness(b, harnessOpts{endpoints: benchEndpoints})
			h.server.streamDone = nil
			st := &memStream{ctx: b.Context(), msgs: c.msgs}
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				st.next = 0
				if err := h.server.Process(st); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			if st.sent != b.N*len(c.msgs) {
				b.Fatalf("%d answers to %d conversations of %d messages", st.sent, b.N, len(c.msgs))
			}
		})
	}
}

// memStream is an ext_proc server stream in memory: Recv returns msgs in turn and then
// io.EOF; Send and SendMsg count the answers.
type memStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*extprocv3.ProcessingRequest
	next int
	sent int
}

func (m *memStream) Context() context.Context                 { return m.ctx }
func (m *memStream) SetHeader(metadata.MD) error              { return nil }
func (m *memStream) Send(*extprocv3.ProcessingResponse) error { m.sent++; return nil }
func (m *memStream) SendMsg(any) error                        { m.sent++; return nil }

// RecvMsg is the stream's receive: the message is handed over as it is, not decoded.
func (m *memStream) RecvMsg(v any) error {
	r, err := m.Recv()
	if err != nil {
		return err
	}
	v.(*received).ProcessingRequest = r
	return nil
}

func (m *memStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if m.next == len(m.msgs) {
		return nil, io.EOF
	}
	m.next++
	return m.msgs[m.next-1], nil
}

// goroutinesCreated is the count of goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []rtmetrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
