package kvevents

// verdict is what to do with a batch given its sequence number.
type verdict int

const (
	vFirst     verdict = iota // nothing applied yet: apply it, the stream starts here
	vNext                     // the next batch: apply it
	vDuplicate                // already applied (replay overlapped the live stream): skip it
	vGap                      // batches were lost: repair by replay, or drop the endpoint's entries
	vReset                    // the publisher restarted: drop the endpoint's entries
)

func (v verdict) String() string {
	return [...]string{"first", "next", "duplicate", "gap", "reset"}[v]
}

// tracker follows one publisher's sequence numbers. vLLM numbers batches from 0, +1 per
// batch, on the live socket; replay resends numbers already sent. A live number not above
// the last live one therefore means a new publisher (engine restart), a live number not
// above the last applied one (but above the last live one) a batch that replay already
// applied, and a jump a loss.
type tracker struct {
	applied int64 // highest sequence number applied; -1: none
	live    int64 // highest sequence number received on the live socket; -1: none
}

func newTracker() tracker { return tracker{applied: -1, live: -1} }

// classifyLive judges a batch received on the live socket and notes its number.
func (t *tracker) classifyLive(seq int64) verdict {
	defer func() { t.live = max(t.live, seq) }()
	switch {
	case t.live >= 0 && seq <= t.live:
		return vReset
	case t.applied < 0:
		return vFirst
	case seq <= t.applied:
		return vDuplicate
	case seq == t.applied+1:
		return vNext
	}
	return vGap
}
