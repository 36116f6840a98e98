package fleet

// View is the endpoint set as of one Update: the addresses, sorted, and their load
// counters. A View never changes, so it is read without a lock, and the same View (the
// same Addrs slice) is returned until the next Update: callers may key caches on it. A
// request routed on an older View than the current one may name an endpoint that has
// left; Book refuses it.
type View struct {
	addrs []string
	eps   []*endpoint
	set   *Set   // nil for a new Set's empty View
	ord   *order // its load order, kept while it is the set's current View (Least)
}

// View returns the endpoint set as of the last Update.
func (s *Set) View() *View { return s.view.Load() }

// Addrs returns the addresses, sorted. The slice is shared: callers must not modify it.
func (v *View) Addrs() []string { return v.addrs }

// InFlight returns the requests in flight (prefill + decode) on the endpoint Addrs()[i],
// other pickers' included, as Loads counts them.
func (v *View) InFlight(i int) int {
	e := v.eps[i]
	rp, rd := unpackRemote(e.remote.Load())
	return int(e.prefill.Load()+e.decode.Load()) + rp + rd
}

// Load returns the whole load of the endpoint Addrs()[i], as Loads does.
func (v *View) Load(i int) Load {
	e := v.eps[i]
	rp, rd := unpackRemote(e.remote.Load())
	return Load{Addr: e.addr, Prefill: int(e.prefill.Load()) + rp, Decode: int(e.decode.Load()) + rd, DecodePace: e.pace.mean()}
}
