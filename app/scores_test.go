package app

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/extproc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestScoresFollowTheConfig routes one header-only request through the running service
// with and without OmitScores and looks for the scores in the answer's dynamic metadata.
func TestScoresFollowTheConfig(t *testing.T) {
	for _, omit := range []bool{false, true} {
		a := start(t, Config{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, OmitScores: omit})
		conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		st, err := extprocv3.NewExternalProcessorClient(conn).Process(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/models")}}}}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		md := resp.GetDynamicMetadata().GetFields()
		_, scores := md[extproc.LBNamespace].GetStructValue().GetFields()[extproc.ScoresKey]
		_, decision := md[extproc.DecisionNamespace]
		if scores == omit || decision == omit {
			t.Errorf("OmitScores %v: scores present %v, decision present %v", omit, scores, decision)
		}
		_ = st.CloseSend()
		conn.Close()
	}
}
