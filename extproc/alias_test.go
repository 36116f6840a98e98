package extproc

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/grpcbuf"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
)

// poisonPool is grpcbuf's Pool, except that a buffer put back is overwritten at once: a
// byte read after its buffer was freed reads 0xA5, not what was received.
type poisonPool struct {
	grpcbuf.Pool
	puts int // buffers poisoned (under mu)
	mu   sync.Mutex
}

func (p *poisonPool) Put(b *[]byte) {
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = 0xA5
	}
	p.mu.Lock()
	p.puts++
	p.mu.Unlock()
	p.Pool.Put(b)
}

// recordingPicker routes every request to one endpoint and records copies of what it was
// asked, by request id.
type recordingPicker struct {
	mu   sync.Mutex
	seen map[string]picker.Request
}

func (p *recordingPicker) PickInto(_ context.Context, r picker.Request, d *picker.Decision) error {
	r.Tokens, r.ChatBody = slices.Clone(r.Tokens), bytes.Clone(r.ChatBody)
	p.mu.Lock()
	p.seen[r.RequestID] = r
	p.mu.Unlock()
	d.Endpoints = append(d.Endpoints[:0], "10.0.0.1:8000")
	return nil
}

// A server decoding into grpcbuf's buffers reads every request exactly and echoes every body
// exactly, although each buffer is poisoned the moment it goes back to the pool: random
// completion and chat bodies of 10 B to 160 KiB, whole or in up to 5 chunks, and random
// response chunks, on 4 streams at once. A body or header read after its buffer was freed
// would be refused as bad JSON, or recorded or echoed with 0xA5 bytes.
func TestAliasedMessagesOutliveNoBuffer(t *testing.T) {
	pool := &poisonPool{}
	rec := &recordingPicker{seen: map[string]picker.Request{}}
	s, err := NewServer(rec, Config{})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(experimental.BufferPool(pool), grpc.ForceServerCodecV2(grpcbuf.NewCodec(pool)), grpc.MaxRecvMsgSize(1<<20))
	extprocv3.RegisterExternalProcessorServer(gs, s)
	conn := serveLoopback(t, gs)
	client := extprocv3.NewExternalProcessorClient(conn)

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 20 {
				if err := aliasConversation(client, r, fmt.Sprintf("w%d-%d", w, i), rec); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.puts == 0 {
		t.Fatal("no buffer went back to the pool: the test poisoned nothing")
	}
}

// aliasConversation plays one random full-duplex conversation and checks what the picker
// recorded and what came back.
func aliasConversation(c extprocv3.ExternalProcessorClient, r *rand.Rand, id string, rec *recordingPicker) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.Process(ctx)
	if err != nil {
		return err
	}
	chat := r.IntN(4) == 0
	path := PathCompletions
	var ids []uint32
	var body []byte
	n := 1 + r.IntN(1<<r.IntN(15))
	if chat {
		path = PathChatCompletions
		text := make([]byte, n*5)
		for i := range text {
			text[i] = 'a' + byte(r.IntN(26))
		}
		body = fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"%s"}]}`, text)
	} else {
		body = []byte(`{"model":"m","prompt":[`)
		for i := range n {
			ids = append(ids, r.Uint32()>>r.IntN(32))
			if i > 0 {
				body = append(body, ',')
			}
			body = strconv.AppendUint(body, uint64(ids[i]), 10)
		}
		body = append(body, "]}"...)
	}
	session := strconv.FormatUint(r.Uint64(), 36)
	msgs := []*extprocv3.ProcessingRequest{withProtocol(headers(false, ":method", "POST", ":path", path,
		"x-request-id", id, "x-user-id", session), filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)}
	for rest, k := body, 1+r.IntN(5); len(rest) > 0; k-- {
		cut := len(rest)
		if k > 1 {
			cut = r.IntN(len(rest) + 1)
		}
		msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: rest[:cut], EndOfStream: cut == len(rest)}}})
		rest = rest[cut:]
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	if _, err := st.Recv(); err != nil { // the routing answer
		return err
	}
	var echoed []byte
	for len(echoed) < len(body) {
		a, err := st.Recv()
		if err != nil {
			return err
		}
		sb := a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			return fmt.Errorf("%s: answer %v, want the body echoed", id, a)
		}
		echoed = append(echoed, sb.GetBody()...)
	}
	if !bytes.Equal(echoed, body) {
		return fmt.Errorf("%s: a %d-byte body was echoed with other bytes", id, len(body))
	}
	rec.mu.Lock()
	got, ok := rec.seen[id]
	rec.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("%s: the picker was not asked under the request's id", id)
	case got.Session != session || got.Path != path || got.Model != "m":
		return fmt.Errorf("%s: the picker was asked with session %q path %q model %q, want %q %q m", id, got.Session, got.Path, got.Model, session, path)
	case !slices.Equal(got.Tokens, ids):
		return fmt.Errorf("%s: the picker got %d token ids, not the %d sent", id, len(got.Tokens), len(ids))
	case chat && !bytes.Equal(got.ChatBody, body):
		return fmt.Errorf("%s: the picker got another chat body", id)
	}
	resp := make([]byte, r.IntN(40<<10))
	for i := range resp {
		resp[i] = byte(r.Uint32())
	}
	for _, m := range []*extprocv3.ProcessingRequest{respHeaders(false), respBody(string(resp), true)} {
		if err := st.Send(m); err != nil {
			return err
		}
		a, err := st.Recv()
		if err != nil {
			return err
		}
		if m.GetResponseBody() != nil && !bytes.Equal(a.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(), resp) {
			return fmt.Errorf("%s: a %d-byte response chunk was echoed with other bytes", id, len(resp))
		}
	}
	return st.CloseSend()
}
