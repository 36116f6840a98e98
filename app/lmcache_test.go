package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/lmcache"
	zmq "github.com/pebbe/zmq4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestLMCacheEventsDriveRouting is the live path: a real ZeroMQ PUSH peer sends 0.3.9-shaped
// batches (register, then admits for the keys of a token-id prompt, with garbage frames
// between), and an ext_proc request for that prompt is routed to the holder under kvaware
// and loadaware, with the matched tokens in the explain header.
func TestLMCacheEventsDriveRouting(t *testing.T) {
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256, Format: lmcache.KeyFormatV03}
	a := start(t, Config{
		Endpoints: []string{"127.0.0.1:8001", "127.0.0.2:8002"}, Explain: extproc.ExplainAll,
		LMCache: &LMCacheConfig{PullAddr: "127.0.0.1:0", ReplyAddr: "127.0.0.1:0", Keys: keys, Allow: lmcache.AllowFleet},
	})
	prompt := make([]uint32, 600)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	h, err := lmcache.NewHasher(keys)
	if err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	enc := func(m lmcache.Message) {
		b, err := lmcache.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, b)
	}
	url := "127.0.0.2:30081"
	enc(lmcache.RegisterMsg{InstanceID: "vllm-b", WorkerID: 0, IP: "127.0.0.2", Port: 8002, DistributedURL: &url})
	batch = append(batch, []byte("\xc1garbage"), []byte(`{"type":"NoSuchMsg"}`))
	for _, k := range h.ChunkKeys(prompt) {
		enc(lmcache.KVAdmitMsg{InstanceID: "vllm-b", WorkerID: 0, Key: k, Location: "LocalCPUBackend"})
	}

	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	push, err := zctx.NewSocket(zmq.PUSH)
	if err != nil {
		t.Fatal(err)
	}
	if err := push.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	// From the IP the batch registers: the controller applies only an engine's own messages.
	if err := push.Connect("tcp://127.0.0.2:0;" + a.LMCachePullAddr()); err != nil {
		t.Fatal(err)
	}
	if _, err := push.SendMessage(batch); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.LMCacheIndex.Keys() < 3 { // no signal exists for "applied": watch the effect
		if time.Now().After(deadline) {
			t.Fatalf("admits not applied after 10s: %d keys", a.LMCacheIndex.Keys())
		}
		time.Sleep(5 * time.Millisecond)
	}
	push.Close()
	if err := zctx.Term(); err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ids := make([]string, len(prompt))
	for i, v := range prompt {
		ids[i] = fmt.Sprint(v)
	}
	body := `{"model":"qwen","prompt":[` + strings.Join(ids, ",") + `]}`
	for _, policy := range []string{"kvaware", "loadaware"} {
		t.Run(policy, func(t *testing.T) {
			if err := a.Picker.SetConfig(pickerConfig(policy)); err != nil {
				t.Fatal(err)
			}
			st, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")},
				{Key: "x-loadaware-explain", RawValue: []byte("1")}}}
			for _, r := range []*extprocv3.ProcessingRequest{
				{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}},
				{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
				{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}},
			} {
				if err := st.Send(r); err != nil {
					t.Fatal(err)
				}
			}
			routed, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			dest := routed.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
			if dest != "127.0.0.2:8002" {
				t.Fatalf("%s routed to %s, want the holder 127.0.0.2:8002", policy, dest)
			}
			if _, err := st.Recv(); err != nil { // the body echo
				t.Fatal(err)
			}
			rh, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			explain := string(rh.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue())
			if !strings.Contains(explain, "127.0.0.2:8002 matched=600") || !strings.Contains(explain, "127.0.0.1:8001 matched=0") {
				t.Fatalf("explain header %q does not show the holder's 600 matched tokens", explain)
			}
			_ = st.CloseSend()
			_, _ = st.Recv()
		})
	}
	if n := a.LMCacheIndex.Keys(); n != 3 {
		t.Fatalf("garbage frames changed the index: %d keys, want 3", n)
	}
}
