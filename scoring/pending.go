package scoring

import (
	"math"
	"time"
)

// pendingSlots is how many of one endpoint's bookings still before their first token
// (State.Pending) State keeps. TTFTAware reads only the newest of them (the cap's last
// booking) and, as each of the others has its first token, adds its observed and predicted
// times to the endpoint's drain ratio: the slots only have to hold the requests in prefill
// on one engine in the bursts the cap is for. vLLM admits a waiting request at most once a
// step, and every admission costs AdmitCost, so 64 queued requests are at least 1.6 s of
// admissions alone; the fleet-saturation floor (ahead(s) at a step's token budget) decides
// such an engine's requests before any cap does. Past 64 the oldest booking kept is dropped
// and counted (pendingRing.lost): its first token still drains the count in order, so the
// later bookings are matched to their own first tokens, and only its observation is lost.
const pendingSlots = 64

// pendingRing is one endpoint's bookings not yet known to have their first token, oldest
// first, with the observed and predicted times to first token of those that had it.
type pendingRing struct {
	at   [pendingSlots]int64   // booked, unix nanoseconds
	pred [pendingSlots]float64 // the first token predicted at booking, seconds after it
	head int                   // the oldest kept
	n    int                   // kept
	lost int                   // dropped at overflow, booked before every kept one
	// obs and predicted sum the observed and predicted times to first token of the
	// bookings that had it since the picker started: the ratio does not forget (decision
	// 1738: decayed over UncachedMemory first tokens it lost the 17 profiles' novel).
	obs, predicted float64
}

// Pending records that a request was booked on addr at now with its first token predicted
// predicted seconds later (TTFTAware: its estimate with the queued prefill charged in
// full, Ranked.FullEstimate). ttftaware reads the pending bookings in Rank.
func (s *State) Pending(addr string, now time.Time, predicted float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[string]*pendingRing{}
	}
	r := s.pending[addr]
	if r == nil {
		r = &pendingRing{}
		s.pending[addr] = r
	}
	if r.n == pendingSlots {
		r.head = (r.head + 1) % pendingSlots
		r.n--
		r.lost++
	}
	i := (r.head + r.n) % pendingSlots
	r.at[i], r.pred[i] = now.UnixNano(), max(predicted, 0)
	r.n++
}

// drain reads addr's requests in prefill now (prefill, this picker's count): in vLLM's
// FIFO the oldest bookings have had their first token when fewer are in prefill than are
// kept, and each adds its observed time (now less its booking; read at the next decision,
// so a little long) and its predicted time to the ratio's sums. It returns the newest
// booking still pending (ok false: none) and the endpoint's observed/predicted ratio
// (ratio ok false: nothing observed yet). s.mu must be held.
func (s *State) drain(addr string, prefill int, now time.Time) (at time.Time, predicted, ratio float64, ok, measured bool) {
	r := s.pending[addr]
	if r == nil {
		return time.Time{}, 0, 0, false, false
	}
	done := r.lost + r.n - max(prefill, 0)
	if done > 0 {
		d := min(done, r.lost)
		r.lost -= d
		done -= d
	}
	t := now.UnixNano()
	for ; done > 0 && r.n > 0; done-- {
		r.obs += max(float64(t-r.at[r.head])/1e9, 0)
		r.predicted += r.pred[r.head]
		r.head = (r.head + 1) % pendingSlots
		r.n--
	}
	if r.predicted > 0 {
		ratio, measured = r.obs/r.predicted, true
	}
	if r.n == 0 {
		return time.Time{}, 0, ratio, false, measured
	}
	last := (r.head + r.n - 1) % pendingSlots
	return time.Unix(0, r.at[last]), r.pred[last], ratio, true, measured
}

// queueCap is the most TTFTAware charges for the prefill queued on an engine whose newest
// pending booking was made at at with its first token predicted predicted seconds later:
// in a FIFO queue the work ahead of a new request ends no later than that booking's first
// token, and the engine's measured ratio of observed to predicted times to first token
// (drain) ages it: the prediction scaled by the ratio, less the time since the booking.
// An engine that drains no faster than predicted (ratio >= 1) gets no cap (+Inf): its
// predictions are known short, and so is any age read from them (decision 1748).
func queueCap(at time.Time, predicted, ratio float64, now time.Time) float64 {
	if ratio >= 1 {
		return math.Inf(1)
	}
	return max(0, predicted*ratio-max(now.Sub(at), 0).Seconds())
}
