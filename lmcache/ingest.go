package lmcache

// IngestFunc wraps the application of frames the controller received from peer (the
// connection's IP). It must call apply exactly once, on the calling goroutine; apply
// applies the frames to the index and reports whether at least one was applied. A
// wrapper may hold a lock around apply (to order it against other writers) or hand the
// frames on to other replicas once apply reported true (package replica does both). The
// frames belong to the caller after the wrapper returns: copy what is kept.
type IngestFunc func(peer string, frames [][]byte, apply func() bool)

func (s *Server) ingest(peer string, frames [][]byte, apply func() bool) {
	if s.cfg.Ingest == nil {
		apply()
		return
	}
	s.cfg.Ingest(peer, frames, apply)
}
