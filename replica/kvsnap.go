package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/nats-io/nats.go"
)

// KVSnapshots is the kvevents.Snapshotter of a replica: a starting replica's KV events
// subscriber takes each engine rank's stream from a peer's index (the entries and the
// sequence number of the last batch they hold) instead of the engine's replay, and falls
// back to the replay when no peer has the stream (docs/decisions/0850). Create it before
// the subscriber, and pass it to Start in Config.KVSnapshots; until then, and until the
// warm start has heard its peers (or given up), Snapshot waits.
type KVSnapshots struct {
	bound chan struct{}
	r     *Replica
}

// NewKVSnapshots returns a Snapshotter for Config.KVSnapshots.
func NewKVSnapshots() *KVSnapshots { return &KVSnapshots{bound: make(chan struct{})} }

// kvsnap replies: a chunk of the encoded kvindex.StreamState, the end (the chunk count),
// or the stream's absence (with the peer's key space, so that the starter adopts it).
const (
	kvChunk byte = 'c'
	kvEnd   byte = 'e'
	kvNone  byte = 'n'
)

// Snapshot asks the peers, the most recently heard first, for the stream, and returns
// the first one's. kvevents.ErrNoSnapshot when no peer is known or none has it. The index
// takes the key space of the first peer that answers, if it has had no stream yet, so
// that the streams it takes from the peers, and the ones it replays, key alike.
func (k *KVSnapshots) Snapshot(ctx context.Context, s kvevents.Stream) (kvevents.Snapshot, error) {
	select {
	case <-k.bound:
	case <-ctx.Done():
		return kvevents.Snapshot{}, fmt.Errorf("replica: not started: %w", ctx.Err())
	}
	r := k.r
	select {
	case <-r.peersHeard:
	case <-ctx.Done():
		return kvevents.Snapshot{}, fmt.Errorf("replica: no peer heard yet: %w", ctx.Err())
	}
	if !r.nc.IsConnected() {
		return kvevents.Snapshot{}, kvevents.ErrNoSnapshot // no peer to ask: replay at once
	}
	var errs []error
	for _, peer := range r.load.peersNewestFirst() {
		st, err := r.fetchKVStream(ctx, peer, s)
		switch {
		case errors.Is(err, errPeerHasNoStream):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("peer %x: %w", peer, err))
			continue
		}
		return kvevents.Snapshot{Resume: st.Seq + 1, State: &st}, nil
	}
	if len(errs) > 0 {
		return kvevents.Snapshot{}, errors.Join(errs...)
	}
	return kvevents.Snapshot{}, kvevents.ErrNoSnapshot
}

// errPeerHasNoStream is fetchKVStream's answer for a peer without the stream.
var errPeerHasNoStream = errors.New("replica: the peer has no such stream")

// fetchKVStream asks peer for stream s of its KV events index.
func (r *Replica) fetchKVStream(ctx context.Context, peer uint64, s kvevents.Stream) (kvindex.StreamState, error) {
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return kvindex.StreamState{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	req := binary.AppendUvarint(nil, uint64(s.Rank))
	req = append(req, s.Endpoint...)
	if err := r.nc.PublishRequest(r.subject("kvsnap."+strconv.FormatUint(peer, 16)), inbox, req); err != nil {
		return kvindex.StreamState{}, err
	}
	var enc []byte
	chunks := uint64(0)
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return kvindex.StreamState{}, err
		}
		if len(msg.Data) == 0 {
			if msg.Header.Get("Status") == "503" {
				return kvindex.StreamState{}, errors.New("the peer is gone (no responders)")
			}
			return kvindex.StreamState{}, errors.New("an empty reply")
		}
		body := msg.Data[1:]
		switch msg.Data[0] {
		case kvChunk:
			enc = append(enc, body...)
			chunks++
		case kvEnd:
			n, w := binary.Uvarint(body)
			if w <= 0 || n != chunks {
				return kvindex.StreamState{}, fmt.Errorf("stream state chunks lost in transit (%d of %d)", chunks, n)
			}
			st, err := kvindex.DecodeStreamState(enc)
			if err != nil {
				return kvindex.StreamState{}, err
			}
			r.cfg.KVEvents.AdoptKeySpace(st.KeySpace)
			return st, nil
		case kvNone:
			if len(body) == 8 {
				r.cfg.KVEvents.AdoptKeySpace(binary.LittleEndian.Uint64(body))
			}
			return kvindex.StreamState{}, errPeerHasNoStream
		default:
			return kvindex.StreamState{}, fmt.Errorf("a reply of unknown kind %q", msg.Data[0])
		}
	}
}

// serveKVStream answers a peer's request for a stream of the KV events index. It runs
// off the subscription's goroutine: the export waits for the batch being applied.
func (r *Replica) serveKVStream(msg *nats.Msg) {
	ix := r.cfg.KVEvents
	if ix == nil { // no KV events here: the starter asks the next peer
		r.publish(msg.Reply, "kvsnapshot", []byte{kvNone})
		return
	}
	rank, w := binary.Uvarint(msg.Data)
	if w <= 0 || rank > 1<<16 {
		return // not a request
	}
	endpoint := string(msg.Data[w:])
	st, err := ix.ExportStream(endpoint, int(rank))
	if err != nil {
		none := binary.LittleEndian.AppendUint64([]byte{kvNone}, ix.KeySpace())
		r.publish(msg.Reply, "kvsnapshot", none)
		return
	}
	enc := kvindex.AppendStreamState(nil, st)
	n := 0
	for len(enc) > 0 {
		c := enc[:min(len(enc), snapshotChunkBytes)]
		enc = enc[len(c):]
		r.publish(msg.Reply, "kvsnapshot", append([]byte{kvChunk}, c...))
		n++
	}
	r.publish(msg.Reply, "kvsnapshot", binary.AppendUvarint([]byte{kvEnd}, uint64(n)))
}
