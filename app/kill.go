package app

// Kill stops the service abruptly, as a crashed process would: the replica leaves NATS
// first (nothing more reaches its peers, not even the releases of its own requests),
// then every ext_proc stream fails at once and the listeners close. For tests and the
// benchmark's replica kill; a real stop is Close.
func (a *App) Kill() {
	a.cancel()
	a.Health.SetServing(false)
	if a.Replica != nil {
		_ = a.Replica.Close()
	}
	a.grpcSrv.Stop()
	if a.healthSrv != nil {
		a.healthSrv.Stop()
	}
	_ = a.httpSrv.Close()
	if a.LMCacheServer != nil {
		_ = a.LMCacheServer.Close()
	}
	if a.KVEventsSubscriber != nil {
		_ = a.KVEventsSubscriber.Close()
	}
	a.wg.Wait()
}
