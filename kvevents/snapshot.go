package kvevents

import (
	"context"
	"errors"

	"github.com/loadaware/loadaware-epp/kvindex"
)

// Snapshot is an engine's cache state as of a point in its live stream, the bootstrap of
// vLLM's open snapshot draft (vllm#57789: a snapshot endpoint beside the replay one, a
// publisher lifetime id, sequence-numbered heartbeats, and an exact resume point), or a
// peer picker replica's index of the stream (package replica, docs/decisions/0850).
type Snapshot struct {
	// Epoch is the publisher's lifetime id: a different one means the engine restarted.
	Epoch string
	// Resume is the sequence number of the first live batch the snapshot does not hold:
	// live batches below it are duplicates, a later first one is a gap.
	Resume int64
	// Batches rebuild the state when applied in order to an emptied stream (an engine's
	// snapshot).
	Batches []kvindex.Batch
	// State, when set instead of Batches, is the stream's entries in another index (a
	// peer replica's); Resume must then be State.Seq+1.
	State *kvindex.StreamState
}

// Stream names the engine rank a snapshot is asked for.
type Stream struct {
	Endpoint string // the engine's ip:port, as the index names it
	Host     string // its address, where its sockets are
	Rank     int
}

// Snapshotter fetches one engine rank's snapshot. The subscriber asks it whenever a
// stream must be rebuilt from nothing (start, reconnect, engine restart); on an error
// (ErrNoSnapshot: none is offered) it falls back to a replay from sequence 0, as it does
// without a Snapshotter.
type Snapshotter interface {
	Snapshot(ctx context.Context, s Stream) (Snapshot, error)
}

// ErrNoSnapshot is a Snapshotter's answer for an engine that serves no snapshots.
var ErrNoSnapshot = errors.New("kvevents: the engine serves no snapshot")

// bootstrap rebuilds the stream from a snapshot and reports whether it did. The stream
// is emptied first; on failure it stays empty and the caller falls back to replay.
func (c *conn) bootstrap(why string) bool {
	s := c.s
	if s.cfg.Snapshots == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReplayTimeout)
	defer cancel()
	snap, err := s.cfg.Snapshots.Snapshot(ctx, Stream{Endpoint: c.f.endpoint, Host: c.host, Rank: c.f.rank})
	switch {
	case errors.Is(err, ErrNoSnapshot):
		s.m.snapshots.WithLabelValues("none").Inc()
		return false
	case err != nil:
		s.m.snapshots.WithLabelValues("failed").Inc()
		s.log.Warn("kvevents: snapshot failed; replaying instead", "endpoint", c.f.endpoint, "rank", c.f.rank, "why", why, "err", err)
		return false
	case snap.Resume < 0 || snap.State != nil && (snap.Resume != snap.State.Seq+1 || len(snap.Batches) > 0):
		s.m.snapshots.WithLabelValues("failed").Inc()
		s.log.Warn("kvevents: snapshot with a resume point that does not fit; replaying instead", "endpoint", c.f.endpoint, "resume", snap.Resume)
		return false
	}
	if snap.State != nil {
		if err := s.idx.ImportStream(c.f.endpoint, c.f.rank, *snap.State); err != nil {
			s.m.snapshots.WithLabelValues("failed").Inc()
			s.log.Warn("kvevents: snapshot refused by the index; replaying instead", "endpoint", c.f.endpoint, "rank", c.f.rank, "err", err)
			return false
		}
	} else {
		s.idx.DropRank(c.f.endpoint, c.f.rank, "snapshot")
		for _, b := range snap.Batches {
			b.DPRank = c.f.rank // the socket names the stream
			b.Seq = snap.Resume - 1
			s.idx.Apply(c.f.endpoint, b)
		}
	}
	if c.epoch != "" && snap.Epoch != c.epoch {
		s.log.Info("kvevents: the engine's publisher lifetime id changed (it restarted)", "endpoint", c.f.endpoint, "rank", c.f.rank)
	}
	c.epoch = snap.Epoch
	c.t.applied = snap.Resume - 1
	s.m.snapshots.WithLabelValues("applied").Inc()
	return true
}
