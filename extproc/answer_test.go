package extproc

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestRoutingAnswerReused builds a run of routing answers of every shape in one
// routingAnswer, as the pool hands one answer to stream after stream, and holds each one's
// wire bytes to the same answer built from new messages: nothing of an earlier answer (a
// third header, a longer value, the other response kind, more metadata) shows in a later.
func TestRoutingAnswerReused(t *testing.T) {
	ranked := []scoring.Ranked{{Addr: "10.0.0.1:8000", Score: 0.5, Reason: scoring.ReasonLeastLoad}, {Addr: "10.0.0.2:8000", Score: 0.25}}
	tests := []struct {
		name      string
		dest, id  string
		pinRank   int
		omit      bool
		inBody    bool
		endpoints int
	}{
		{"every header, scores, in the headers response", "10.0.0.1:8000,10.0.0.2:8000", "0e8f4c1a-0000-4000-8000-000000000000", 3, false, false, 2},
		{"destination only, no scores", "10.0.0.1:8000", "", 0, true, false, 1},
		{"a request id, in the body response", "10.0.0.2:8000", "r", 0, false, true, 1},
		{"a rank without a request id", "10.0.0.1:8000", "", 1, true, true, 1},
		{"a long destination list", strings.Repeat("10.0.0.9:8000,", 40) + "10.0.0.1:8000", "", 12, false, false, 2},
		{"destination only again", "10.0.0.1:8000", "", 0, true, false, 1},
		{"an empty destination (a raw value protobuf leaves out)", "", "r", 2, true, true, 1},
	}
	var a routingAnswer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &picker.Decision{Policy: "leastload", Ranked: ranked[:tt.endpoints], PinRank: tt.pinRank}
			got, err := proto.Marshal(a.build(tt.dest, tt.id, d, tt.omit, tt.inBody))
			if err != nil {
				t.Fatal(err)
			}
			set := []*corev3.HeaderValueOption{setHeader(DestinationHeader, tt.dest)}
			if tt.id != "" {
				set = append(set, setHeader(RequestIDHeader, tt.id))
			}
			if tt.pinRank > 0 {
				set = append(set, setHeader(RankHeader, strconv.Itoa(tt.pinRank-1)))
			}
			c := &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
			want := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
			if tt.inBody {
				want.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}
			}
			want.ProtoReflect().SetUnknown(new(metadataBuf).appendRouting(nil, tt.dest, d, tt.omit))
			var gotMsg, wantMsg extprocv3.ProcessingResponse
			wantBytes, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			// What grpcbuf's codec sends: the encoding, byte for byte, without protobuf.
			if enc := a.AppendEncoded(nil); !bytes.Equal(enc, wantBytes) || len(enc) != a.EncodedSize() {
				t.Fatalf("the answer encoded by hand (%d bytes, announced %d) is not protobuf's (%d):\n%x\n%x", len(enc), a.EncodedSize(), len(wantBytes), enc, wantBytes)
			}
			if err := proto.Unmarshal(got, &gotMsg); err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(wantBytes, &wantMsg); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&wantMsg, &gotMsg, protocmp.Transform()); diff != "" {
				t.Fatalf("the reused answer differs from a new one (-new +reused):\n%s", diff)
			}
		})
	}
}

// TestUnreadBodiesCounted checks loadaware_extproc_unread_bodies_total by mode, through the
// once-looked-up series and past them (a mode number this build does not know).
func TestUnreadBodiesCounted(t *testing.T) {
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := []struct {
		mode filterv3.ProcessingMode_BodySendMode
		n    int
	}{{filterv3.ProcessingMode_STREAMED, 3}, {filterv3.ProcessingMode_NONE, 1}, {filterv3.ProcessingMode_BodySendMode(42), 2}}
	for _, c := range counts {
		for range c.n {
			m.bodyless.inc(c.mode)
		}
	}
	for _, c := range counts {
		if got := testutil.ToFloat64(m.bodyless.vec.WithLabelValues(c.mode.String())); got != float64(c.n) {
			t.Errorf("mode %v: counted %v, want %d", c.mode, got, c.n)
		}
	}
	if got := testutil.CollectAndCount(m.bodyless.vec); got != len(counts) {
		t.Errorf("%d series, want %d (one per mode counted, none before)", got, len(counts))
	}
}

// TestBodyAnswerEncoding sends run of body chunks of every shape (request and response,
// empty and at varint length boundaries, ending the body or not) from one bodyAnswer, as
// the pool hands one answer to chunk after chunk, and holds each encoding it writes itself
// (what grpcbuf's codec sends) and the messages it builds (what protobuf's codecs send) to
// protobuf's encoding of the same answer built from new messages, byte for byte.
func TestBodyAnswerEncoding(t *testing.T) {
	var a bodyAnswer
	for _, n := range []int{0, 1, 127, 128, 8194, 16383, 16384, 70000, 0} {
		for _, request := range []bool{true, false} {
			for _, eos := range []bool{false, true} {
				chunk := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
				sbr := &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos}
				br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: sbr}}}}
				want := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
				if request {
					want.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}
				}
				wantBytes, err := proto.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				a.set(request, chunk, eos)
				if enc := a.AppendEncoded(nil); !bytes.Equal(enc, wantBytes) || len(enc) != a.EncodedSize() {
					t.Fatalf("%d bytes, request %v, eos %v: encoded %d bytes (announced %d), protobuf %d:\n%x\n%x",
						n, request, eos, len(enc), a.EncodedSize(), len(wantBytes), enc[:min(len(enc), 32)], wantBytes[:min(len(wantBytes), 32)])
				}
				got, err := proto.Marshal(&a)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, wantBytes) {
					t.Fatalf("%d bytes, request %v, eos %v: the built messages' encoding differs from protobuf's of new ones", n, request, eos)
				}
				a.forget()
				if a.sbr.Body != nil || a.chunk != nil {
					t.Fatal("forget kept the chunk")
				}
			}
		}
	}
}
