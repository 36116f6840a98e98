package main

import (
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
)

// hardening are the flags bounding what clients and engines can make the picker hold
// (docs/security.md).
type hardening struct {
	maxStreams          int
	maxBufferedBytes    int64
	idleTimeout         time.Duration
	explain             string
	maxPromptBytes      int
	clientCA            string
	maxGRPCConns        int
	maxHTTPConns        int
	maxConnsPerIP       int
	healthCheckInterval time.Duration
	healthCheckPath     string
	lmMaxKeys           int
	lmMaxInstancesPerIP int
	connReadRate        int64
	connReadBurst       int64
	connStreamRate      int64
	connStreamBurst     int64
	unpacedBodyBytes    int64
	maxMessageBytes     int
	lmPeerRate          int64
	lmPeerBurst         int64
	lmMaxFrameBytes     int64
	lmMaxPeerConns      int
	lmIngestCPU         float64
	largeTokenizations  int
	largeTokenizeCPU    float64
}

func (h *hardening) register(fs *flag.FlagSet) {
	fs.IntVar(&h.maxStreams, "max-streams", extproc.DefaultMaxStreams, "concurrent ext_proc streams (requests); more are answered 503")
	fs.Int64Var(&h.maxBufferedBytes, "max-buffered-bytes", extproc.DefaultMaxBufferedBytes, "request body bytes held across all requests being read, and ext_proc messages over 64 KiB arriving; over it a request is answered 503 (a message arriving: its stream ends RESOURCE_EXHAUSTED)")
	fs.DurationVar(&h.idleTimeout, "stream-idle-timeout", extproc.DefaultIdleTimeout, "longest silence while a request is read (before routing); over it the request is answered 408")
	fs.StringVar(&h.explain, "explain", "token", "who gets the x-loadaware-decision header on asking: token (requests with Authorization: Bearer <admin token>), all, or off")
	fs.IntVar(&h.maxPromptBytes, "max-prompt-bytes", picker.DefaultMaxPromptBytes, "largest text or chat prompt tokenized; larger ones are routed on load alone; -1: no bound")
	fs.IntVar(&h.largeTokenizations, "large-tokenizations", 0, "prompts of 32 KiB or more tokenized at once; one more is routed on load alone rather than wait; 0: half the CPUs (at least 1); -1: no bound")
	fs.Float64Var(&h.largeTokenizeCPU, "large-tokenize-cpu", picker.DefaultLargeTokenizeCPU, "share of one CPU the tokenizations of prompts of 32 KiB or more may use on average, all together (100 ms at once above it); while over it such a prompt is routed on load alone (counted text-tokenizer-over-budget); -1: no budget")
	fs.StringVar(&h.clientCA, "client-ca", "", "PEM file of the CA signing Envoy's client certificate: ext_proc then requires mutual TLS")
	fs.IntVar(&h.maxGRPCConns, "max-grpc-connections", app.DefaultMaxGRPCConns, "connections the ext_proc port holds at once; more wait in the kernel backlog")
	fs.IntVar(&h.maxHTTPConns, "max-http-connections", app.DefaultMaxHTTPConns, "connections the metrics port holds at once; more wait in the kernel backlog")
	fs.IntVar(&h.maxConnsPerIP, "max-connections-per-ip", app.DefaultMaxConnsPerIP, "connections one client IP may hold on the metrics and health ports; more are closed at once")
	fs.DurationVar(&h.healthCheckInterval, "health-check-interval", 250*time.Millisecond, "period of the active GET --health-check-path checks of static --endpoints; 0 disables them")
	fs.IntVar(&h.lmMaxKeys, "lmcache-max-keys", lmcache.DefaultMaxKeys, "chunk keys the LMCache index holds (about 120-160 bytes each); beyond it the least recently used go first; -1: no bound")
	fs.IntVar(&h.lmMaxInstancesPerIP, "lmcache-max-instances-per-ip", lmcache.DefaultMaxInstancesPerIP, "LMCache instance ids admitted per engine IP; more are refused (counted)")
	fs.Int64Var(&h.connReadRate, "grpc-conn-read-rate", app.DefaultConnReadRate, "bytes per second one ext_proc connection may send; its requests with bodies past --grpc-unpaced-body-bytes wait (HTTP/2 flow control blocks their sender) once they are one --max-body-bytes body ahead of it (or one burst, if smaller) and, one burst of debt further, the whole connection is read slower; -1: no bound")
	fs.Int64Var(&h.unpacedBodyBytes, "grpc-unpaced-body-bytes", extproc.DefaultUnpacedBodyBytes, "body bytes of one request (request and response) that never wait on --grpc-conn-read-rate, so small requests do not queue behind large ones")
	fs.IntVar(&h.maxMessageBytes, "grpc-max-message-bytes", app.DefaultMaxMessageBytes, "largest ext_proc message received (a body chunk, or a whole buffered body); one over 64 KiB is counted against --max-buffered-bytes from its length prefix on (RSS bound: docs/security.md)")
	fs.Int64Var(&h.connReadBurst, "grpc-conn-read-burst", app.DefaultConnReadBurst, "bytes an ext_proc connection may send at once above --grpc-conn-read-rate (its large bodies: at most one --max-body-bytes of them)")
	fs.Int64Var(&h.connStreamRate, "grpc-conn-stream-rate", app.DefaultConnStreamRate, "ext_proc streams (requests) per second one connection may open; more are refused with gRPC RESOURCE_EXHAUSTED and the connection is not read until it could open one; -1: no bound")
	fs.Int64Var(&h.connStreamBurst, "grpc-conn-stream-burst", app.DefaultConnStreamBurst, "ext_proc streams a connection may open at once above --grpc-conn-stream-rate")
	fs.Int64Var(&h.lmPeerRate, "lmcache-peer-rate", lmcache.DefaultPeerRate, "bytes per second of LMCache messages one engine IP may send, those dropped for their size and its ZMTP commands (PING, ...; at least 64 bytes each) included; a faster one is read slower (its sends block) and, far over, dropped; -1: no bound")
	fs.Int64Var(&h.lmPeerBurst, "lmcache-peer-burst", lmcache.DefaultPeerBurst, "bytes of LMCache messages an engine IP may send at once above --lmcache-peer-rate (a full sync)")
	fs.Int64Var(&h.lmMaxFrameBytes, "lmcache-max-frame-bytes", lmcache.DefaultMaxFrameBytes, "largest LMCache message, all its frames together (a full sync's batch is about 18 KB): a frame over it ends its connection, a message of frames under it over it is dropped. What a peer connection can make the controller hold is 102 such messages (docs/security.md)")
	fs.IntVar(&h.lmMaxPeerConns, "lmcache-max-peer-conns", lmcache.DefaultMaxPeerConns, "connections one IP may hold to each LMCache controller socket (a worker holds one; an engine pod runs one worker a tensor-parallel rank); one past it is ended as it is accepted; -1: no cap")
	fs.Float64Var(&h.lmIngestCPU, "lmcache-ingest-cpu", lmcache.DefaultIngestCPU, "share of one CPU the LMCache controller may spend receiving and applying cache events, every engine together; over it, it stops reading (the engines' sends block); -1: no bound")
	fs.StringVar(&h.healthCheckPath, "health-check-path", "/health", "path of the engines' health endpoint (vLLM: /health)")
}

// apply checks the flags and sets them on cfg. Its errors are one line: what is wrong
// and what would be right.
func (h *hardening) apply(cfg *app.Config, o options) error {
	switch {
	case h.maxStreams < 1:
		return fmt.Errorf("--max-streams %d: use at least 1 (default %d)", h.maxStreams, extproc.DefaultMaxStreams)
	case h.maxBufferedBytes < o.maxBodyBytes:
		return fmt.Errorf("--max-buffered-bytes %d is smaller than --max-body-bytes %d: one request could never be read; raise it (default %d)", h.maxBufferedBytes, o.maxBodyBytes, extproc.DefaultMaxBufferedBytes)
	case h.idleTimeout <= 0:
		return fmt.Errorf("--stream-idle-timeout %v: use a positive duration such as 30s", h.idleTimeout)
	case h.maxPromptBytes == 0 || h.maxPromptBytes < -1:
		return fmt.Errorf("--max-prompt-bytes %d: use a size in bytes (default %d) or -1 for no bound", h.maxPromptBytes, picker.DefaultMaxPromptBytes)
	case h.largeTokenizations < -1:
		return fmt.Errorf("--large-tokenizations %d: use a count, 0 for half the CPUs or -1 for no bound", h.largeTokenizations)
	case h.largeTokenizeCPU <= 0 && h.largeTokenizeCPU != -1, math.IsNaN(h.largeTokenizeCPU), math.IsInf(h.largeTokenizeCPU, 0):
		return fmt.Errorf("--large-tokenize-cpu %g: give a share of one CPU such as 0.5 (default %g), or -1 for no budget", h.largeTokenizeCPU, picker.DefaultLargeTokenizeCPU)
	case h.clientCA != "" && !o.secure:
		return fmt.Errorf("--client-ca needs --secure-serving: mutual TLS is TLS")
	case h.maxGRPCConns < 1 || h.maxHTTPConns < 1 || h.maxConnsPerIP < 1:
		return fmt.Errorf("--max-grpc-connections, --max-http-connections and --max-connections-per-ip must be at least 1")
	case h.healthCheckInterval < 0:
		return fmt.Errorf("--health-check-interval %v: use a positive duration such as 250ms, or 0 to disable the checks", h.healthCheckInterval)
	}
	if h.lmMaxKeys == 0 || h.lmMaxKeys < -1 || h.lmMaxInstancesPerIP < 1 {
		return fmt.Errorf("--lmcache-max-keys must be a count (default %d) or -1, and --lmcache-max-instances-per-ip at least 1", lmcache.DefaultMaxKeys)
	}
	if h.connReadRate == 0 || h.connReadRate < -1 || h.connReadBurst < 1 {
		return fmt.Errorf("--grpc-conn-read-rate must be bytes per second (default %d) or -1, and --grpc-conn-read-burst at least 1 byte (default %d)", app.DefaultConnReadRate, app.DefaultConnReadBurst)
	}
	if h.connStreamRate == 0 || h.connStreamRate < -1 || h.connStreamBurst < 1 {
		return fmt.Errorf("--grpc-conn-stream-rate must be streams per second (default %d) or -1, and --grpc-conn-stream-burst at least 1 stream (default %d)", app.DefaultConnStreamRate, app.DefaultConnStreamBurst)
	}
	if h.maxMessageBytes < 64<<10 {
		return fmt.Errorf("--grpc-max-message-bytes %d: use at least 65536 (64 KiB; default %d), more than Envoy's largest body chunk", h.maxMessageBytes, app.DefaultMaxMessageBytes)
	}
	if h.unpacedBodyBytes < 1 {
		return fmt.Errorf("--grpc-unpaced-body-bytes %d: use at least 1 byte (default %d)", h.unpacedBodyBytes, extproc.DefaultUnpacedBodyBytes)
	}
	if h.lmPeerRate == 0 || h.lmPeerRate < -1 || h.lmPeerBurst < 1 {
		return fmt.Errorf("--lmcache-peer-rate must be bytes per second (default %d) or -1, and --lmcache-peer-burst at least 1 byte (default %d)", lmcache.DefaultPeerRate, lmcache.DefaultPeerBurst)
	}
	if h.lmMaxPeerConns == 0 || h.lmMaxPeerConns < -1 {
		return fmt.Errorf("--lmcache-max-peer-conns %d: use at least 1 (default %d: one LMCache worker a tensor-parallel rank of an engine pod), or -1 for no cap", h.lmMaxPeerConns, lmcache.DefaultMaxPeerConns)
	}
	if h.lmMaxFrameBytes < 4<<10 {
		return fmt.Errorf("--lmcache-max-frame-bytes %d: use at least 4096 bytes (default %d), more than LMCache's largest message, all its frames together (a full sync's batch, about 18 KB)", h.lmMaxFrameBytes, lmcache.DefaultMaxFrameBytes)
	}
	if h.lmIngestCPU <= 0 && h.lmIngestCPU != -1 {
		return fmt.Errorf("--lmcache-ingest-cpu %g: give a share of one CPU (default %g) or -1 for no bound", h.lmIngestCPU, lmcache.DefaultIngestCPU)
	}
	cfg.ConnReadRate, cfg.ConnReadBurst = h.connReadRate, h.connReadBurst
	cfg.ConnStreamRate, cfg.ConnStreamBurst = h.connStreamRate, h.connStreamBurst
	cfg.MaxMessageBytes = h.maxMessageBytes
	if cfg.LMCache != nil {
		cfg.LMCache.MaxKeys, cfg.LMCache.MaxInstancesPerIP = h.lmMaxKeys, h.lmMaxInstancesPerIP
		cfg.LMCache.PeerRate, cfg.LMCache.PeerBurst = h.lmPeerRate, h.lmPeerBurst
		cfg.LMCache.MaxFrameBytes = h.lmMaxFrameBytes
		cfg.LMCache.MaxPeerConns = h.lmMaxPeerConns
		cfg.LMCache.IngestCPU = h.lmIngestCPU
	}
	mode, err := extproc.ParseExplainMode(h.explain)
	if err != nil {
		return fmt.Errorf("--explain: %v", err)
	}
	cfg.Limits = extproc.Limits{MaxStreams: h.maxStreams, MaxBufferedBytes: h.maxBufferedBytes, IdleTimeout: h.idleTimeout, UnpacedBodyBytes: h.unpacedBodyBytes}
	cfg.Explain, cfg.MaxPromptBytes, cfg.ClientCA = mode, h.maxPromptBytes, h.clientCA
	cfg.LargeTokenizations, cfg.LargeTokenizeCPU = h.largeTokenizations, h.largeTokenizeCPU
	cfg.MaxGRPCConns, cfg.MaxHTTPConns, cfg.MaxConnsPerIP = h.maxGRPCConns, h.maxHTTPConns, h.maxConnsPerIP
	cfg.Health.CheckPath = h.healthCheckPath
	if len(cfg.Endpoints) > 0 { // static mode: nothing else tells us an engine died
		cfg.Health.CheckInterval = h.healthCheckInterval
	}
	return nil
}
