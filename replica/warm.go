package replica

import (
	"context"
	"errors"
	"maps"
	"sort"
	"strconv"
	"time"
)

// serveSnapshot sends the index to a starting peer at reply: KindFrames chunks, then a
// KindSnapEnd naming, per origin, the last frames message the chunks contain. It runs on
// the subscription's goroutine, so every frames message handled before the request is
// in the snapshot and every one after it is not.
func (r *Replica) serveSnapshot(reply string) {
	g := r.cfg.Gate
	if g == nil {
		return
	}
	var chunks [][]byte
	g.mu.Lock()
	seqs := maps.Clone(r.applied)
	seqs[r.origin] = r.frameSeq
	err := g.exportLocked(r.origin, snapshotChunkBytes, func(b []byte) error {
		chunks = append(chunks, b)
		return nil
	})
	g.mu.Unlock()
	if err != nil {
		r.log.Error("replica: export the index for a starting peer", "err", err)
		return
	}
	r.wg.Go(func() {
		for _, c := range chunks {
			r.publish(reply, "snapshot", c)
		}
		r.publish(reply, "snapshot", AppendEncode(nil, Message{Kind: KindSnapEnd, Origin: r.origin, Seqs: seqs, Chunks: uint64(len(chunks))}))
		r.met.served.Inc()
	})
}

// warmStart takes the index from a peer, then opens the gate and Ready. Without a gate
// there is nothing to take.
func (r *Replica) warmStart(ctx context.Context) {
	began := r.now()
	outcome := "no-peer"
	defer func() {
		r.met.warm.WithLabelValues(outcome).Inc()
		r.met.warmSeconds.Set(r.now().Sub(began).Seconds())
		r.log.Info("replica: index warm", "outcome", outcome, "took", r.now().Sub(began).String())
		close(r.ready)
	}()
	defer r.heardOnce.Do(func() { close(r.peersHeard) })
	g := r.cfg.Gate
	if g == nil && r.cfg.KVSnapshots == nil {
		r.stopWarming()
		return
	}
	if g != nil {
		defer g.Open()
	}
	deadline := time.NewTimer(r.cfg.WarmTimeout)
	defer deadline.Stop()
	// A peer answers the hello with its state, and publishes one every StateInterval anyway:
	// silence for three of them (at least PeerWait) means there is none.
	for !r.nc.IsConnected() {
		select {
		case <-ctx.Done():
			outcome = "timeout"
			r.abandonWarm()
			return
		case <-deadline.C:
			outcome = "timeout"
			r.log.Warn("replica: NATS unreachable at start: serving with this replica's own index and the engines' counts (see loadaware_replica_nats_connected)", "url", r.cfg.URL)
			r.abandonWarm()
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := r.nc.Flush(); err != nil {
		r.log.Warn("replica: NATS flush at start", "err", err)
	}
	// Ask the peers to publish their state now rather than at their next interval.
	if err := r.nc.Publish(r.subject("hello"), nil); err != nil {
		r.log.Warn("replica: NATS publish at start", "err", err)
	}
	select {
	case <-r.firstPeer:
	case <-time.After(max(3*r.cfg.StateInterval, r.cfg.PeerWait)):
		r.abandonWarm()
		return
	case <-ctx.Done():
		r.abandonWarm()
		return
	}
	r.heardOnce.Do(func() { close(r.peersHeard) })
	if g == nil { // KV events only: their streams are taken one by one (KVSnapshots)
		outcome = "peers-heard"
		r.stopWarming()
		return
	}
	for _, peer := range r.load.peersNewestFirst() {
		chunks, end, err := r.fetchSnapshot(ctx, peer, deadline.C)
		if err != nil {
			r.log.Warn("replica: snapshot from a peer failed; trying the next", "peer", strconv.FormatUint(peer, 16), "err", err)
			outcome = "timeout"
			continue
		}
		outcome = r.applySnapshot(chunks, end)
		return
	}
	r.abandonWarm()
}

// fetchSnapshot asks peer for its index and collects the answer.
func (r *Replica) fetchSnapshot(ctx context.Context, peer uint64, deadline <-chan time.Time) ([]Message, Message, error) {
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, Message{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := r.nc.PublishRequest(r.subject("snapshot."+strconv.FormatUint(peer, 16)), inbox, nil); err != nil {
		return nil, Message{}, err
	}
	var chunks []Message
	for {
		ctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-deadline:
				cancel()
			case <-ctx.Done():
			}
		}()
		msg, err := sub.NextMsgWithContext(ctx)
		cancel()
		if err != nil {
			return nil, Message{}, err
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			return nil, Message{}, errors.New("the peer is gone (no responders)")
		}
		m, err := Decode(msg.Data)
		if err != nil {
			return nil, Message{}, err
		}
		switch m.Kind {
		case KindFrames:
			chunks = append(chunks, m)
		case KindSnapEnd:
			if m.Chunks != uint64(len(chunks)) {
				return nil, Message{}, errors.New("snapshot chunks lost in transit")
			}
			return chunks, m, nil
		}
	}
}

// applySnapshot applies a snapshot, then the peers' frames received since the
// subscription began that the snapshot does not hold, and ends warming.
func (r *Replica) applySnapshot(chunks []Message, end Message) string {
	g := r.cfg.Gate
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range chunks {
		g.restoreLocked(c.Peer, c.Frames)
	}
	maps.Copy(r.applied, end.Seqs)
	outcome := "snapshot"
	r.warmMu.Lock()
	defer r.warmMu.Unlock()
	for _, m := range r.buffered {
		out := r.applyFramesLocked(m)
		if out == outGap {
			outcome = "gap"
		}
		r.met.received.WithLabelValues(m.Kind.String(), out).Inc()
	}
	r.buffered, r.warming = nil, false
	return outcome
}

// abandonWarm applies the frames buffered while warming and ends warming.
func (r *Replica) abandonWarm() {
	if r.cfg.Gate == nil {
		r.stopWarming()
		return
	}
	r.applySnapshot(nil, Message{})
}

// stopWarming ends warming without a gate.
func (r *Replica) stopWarming() {
	r.warmMu.Lock()
	r.buffered, r.warming = nil, false
	r.warmMu.Unlock()
}

// peersNewestFirst returns the origins of the peers in the load view, the most recently
// heard first.
func (v *loadView) peersNewestFirst() []uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]uint64, 0, len(v.peers))
	for o := range v.peers {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return v.peers[out[i]].seen.After(v.peers[out[j]].seen) })
	return out
}
