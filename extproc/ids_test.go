package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc"
)

// arrayPicker routes every request to one endpoint and keeps each request's token ids as it
// was given them, and a copy. Keeping the slices keeps their arrays alive: two requests
// can then share an array's address only if the server gave them the same array.
type arrayPicker struct {
	mu     sync.Mutex
	given  [][]uint32
	copies [][]uint32
}

func (p *arrayPicker) PickInto(_ context.Context, r picker.Request, d *picker.Decision) error {
	p.mu.Lock()
	p.given = append(p.given, r.Tokens)
	p.copies = append(p.copies, slices.Clone(r.Tokens))
	p.mu.Unlock()
	d.Endpoints = append(d.Endpoints[:0], "10.0.0.1:8000")
	return nil
}

// Requests with token ids, one after another, get their ids exactly and, once the server has
// decoded ids, mostly in an array an earlier request had: the server keeps it between
// decisions. A prompt longer than maxKeptIDs is decoded into an array of its own that no
// later request gets.
func TestStreamsReuseTheirTokenIDArray(t *testing.T) {
	p := &arrayPicker{}
	s, err := NewServer(p, Config{})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, s)
	client := extprocv3.NewExternalProcessorClient(serveLoopback(t, gs))

	// Sizes in ids; the body's length sets the array decoded into (about a fifth of its bytes).
	sizes := []int{300, 40, 1500, 7, 300, maxKeptIDs * 6, 1500, 2}
	for range 24 {
		sizes = append(sizes, 1500)
	}
	var sent [][]uint32
	for i, n := range sizes {
		ids := make([]uint32, n)
		for j := range ids {
			ids[j] = uint32(i*100003 + j*7)
		}
		sent = append(sent, ids)
		if err := idsConversation(client, ids); err != nil {
			t.Fatalf("request %d (%d ids): %v", i, n, err)
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.copies) != len(sizes) {
		t.Fatalf("the picker was asked %d times, want %d", len(p.copies), len(sizes))
	}
	big := &p.given[5][0]
	reused := 0
	for i := range sizes {
		if !slices.Equal(p.copies[i], sent[i]) {
			t.Fatalf("request %d: the picker got %d ids, not the %d sent (or other values)", i, len(p.copies[i]), len(sent[i]))
		}
		if i > 5 && &p.given[i][0] == big {
			t.Errorf("request %d got the array of the %d-id prompt: the server kept more than maxKeptIDs", i, sizes[5])
		}
		for j := range i {
			if &p.given[i][0] == &p.given[j][0] {
				reused++
				break
			}
		}
	}
	// Serial conversations get the kept array back unless the pool dropped it: most reuse,
	// and none without it. The race detector's sync.Pool drops a quarter of what is put
	// back: there fewer reuse, never none.
	want := len(sizes) / 2
	if raceEnabled {
		want = 4
	}
	t.Logf("%d of %d requests reused an earlier request's array", reused, len(sizes))
	if reused < want {
		t.Fatalf("%d of %d requests decoded their ids into an array an earlier request had, want at least %d", reused, len(sizes), want)
	}
}

// idsConversation plays one full-duplex completion with the prompt ids and waits for the
// RPC's end, after which the server has put the stream back in its pool.
func idsConversation(c extprocv3.ExternalProcessorClient, ids []uint32) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.Process(ctx)
	if err != nil {
		return err
	}
	body := []byte(`{"model":"m","prompt":[`)
	for i, id := range ids {
		if i > 0 {
			body = append(body, ',')
		}
		body = strconv.AppendUint(body, uint64(id), 10)
	}
	body = append(body, "]}"...)
	for _, m := range []*extprocv3.ProcessingRequest{
		withProtocol(postHeaders(PathCompletions), filterv3.ProcessingMode_FULL_DUPLEX_STREAMED),
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	} {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	a, err := st.Recv()
	if err != nil {
		return err
	}
	if a.GetRequestHeaders() == nil {
		return fmt.Errorf("answer %v, want the routing answer in the headers response", a)
	}
	for echoed := 0; echoed < len(body); {
		a, err := st.Recv()
		if err != nil {
			return err
		}
		echoed += len(a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	if err := st.Send(respHeaders(true)); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the response: %v, want the stream's end", err)
	}
	return nil
}
