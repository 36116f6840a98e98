package app

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/stackcheck"
)

// authorized reports whether r carries the admin bearer token, answering it otherwise
// (403 without a configured token, 401 with a missing or wrong one).
func authorized(w http.ResponseWriter, r *http.Request, token, what string) bool {
	if token == "" {
		http.Error(w, what+" is disabled: start the picker with --admin-token or LOADAWARE_ADMIN_TOKEN set", http.StatusForbidden)
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="loadaware-epp admin"`)
		http.Error(w, "missing or wrong bearer token: send Authorization: Bearer <the --admin-token value>", http.StatusUnauthorized)
		return false
	}
	return true
}

// serveState answers GET /admin/state: the endpoints, the cache sources' state and the
// tokenizer, as stackcheck.PickerState (for loadaware-epp check).
func (a *App) serveState(w http.ResponseWriter, r *http.Request) {
	if !authorized(w, r, a.cfg.AdminToken, "/admin/state") {
		return
	}
	writeJSON(w, http.StatusOK, a.State(time.Now()))
}

// State is the service's state as GET /admin/state reports it at now.
func (a *App) State(now time.Time) stackcheck.PickerState {
	st := stackcheck.PickerState{Endpoints: a.Fleet.Endpoints(), CacheSource: "none"}
	switch {
	case a.KVEventsSubscriber != nil:
		st.CacheSource = a.cfg.CacheSource
	case a.LMCacheIndex != nil:
		st.CacheSource = picker.SourceLMCache
	}
	switch t := a.obs.tokenizer.(type) {
	case nil:
	case *picker.Tokens:
		if t.Local != nil {
			st.Tokenizer = t.Local.String()
		}
		st.FromEngine = t.Engine != nil
	default:
		st.Tokenizer = fmt.Sprintf("%T", t)
	}
	if a.LMCacheIndex != nil {
		k := a.LMCacheIndex.Hasher().Config()
		lm := &stackcheck.LMCacheState{HashSeed: k.HashSeed, ChunkSize: k.ChunkSize, KeyFormat: k.Format.String(),
			PullPort: portOf(a.LMCachePullAddr()), ReplyPort: portOf(a.LMCacheReplyAddr())}
		for _, in := range a.LMCacheIndex.Instances() {
			lm.Instances = append(lm.Instances, stackcheck.Instance{ID: in.ID, IP: in.IP, State: string(in.State), Keys: in.Keys,
				Heartbeats: in.Heartbeats, LastSeen: now.Sub(in.LastSeen).Seconds()})
		}
		st.LMCache = lm
	}
	if c := a.cfg.KVEvents; c != nil {
		kv := &stackcheck.KVEventsState{Port: c.Port, ReplayPort: c.ReplayPort, Ranks: max(c.Ranks, 1)}
		for _, ep := range st.Endpoints {
			if v, ok := a.obs.streams.Load(ep); ok {
				s := v.(*streamSeen)
				kv.Streams = append(kv.Streams, stackcheck.Stream{Endpoint: ep, Seq: s.seq.Load(), Batches: s.batches.Load(),
					LastBatch: now.Sub(time.Unix(0, s.at.Load())).Seconds()})
			}
		}
		st.KVEvents = kv
	}
	if a.CacheAlarm != nil {
		st.Alarm = &stackcheck.AlarmState{WindowSeconds: a.CacheAlarm.Window().Seconds(), Endpoints: a.CacheAlarm.States()}
	}
	if a.cfg.Replicas != nil {
		st.Replicas = &stackcheck.ReplicasConfig{Subject: a.cfg.Replicas.Subject}
	}
	return st
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// serveLookup answers POST /admin/lookup: for a body as vLLM's POST /tokenize takes it
// ({"prompt": "..."} or a chat request with "messages"), the picker's token ids and how
// many of them each endpoint holds (stackcheck.Lookup). A prompt of token ids
// ({"prompt": [1, 2, 3]}, as /v1/completions takes it) is looked up as it is, with no
// tokenizer.
func (a *App) serveLookup(w http.ResponseWriter, r *http.Request) {
	if !authorized(w, r, a.cfg.AdminToken, "/admin/lookup") {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in struct {
		Model    string          `json:"model"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &in); err != nil || (in.Prompt == nil) == (in.Messages == nil) {
		http.Error(w, `the body must be JSON as vLLM's /tokenize takes it: {"prompt": "..."} or {"messages": [...]} (one of them)`, http.StatusBadRequest)
		return
	}
	req := picker.Request{Path: "/v1/chat/completions", Model: in.Model, ChatBody: body}
	var ids []uint32
	if in.Prompt != nil {
		var text string
		if json.Unmarshal(in.Prompt, &text) != nil && json.Unmarshal(in.Prompt, &ids) != nil {
			http.Error(w, `"prompt" must be a string or an array of token ids`, http.StatusBadRequest)
			return
		}
		req = picker.Request{Path: "/v1/completions", Model: in.Model, Prompt: text}
	}
	eps := a.Fleet.Endpoints()
	out := stackcheck.Lookup{Matched: map[string]int{}}
	switch {
	case ids != nil:
		out.Tokens = ids
	case a.obs.tokenizer == nil:
		out.Error = "the picker has no tokenizer: start it with --tokenizer, --model or --tokenizer-from-engine"
		writeJSON(w, http.StatusOK, out)
		return
	default:
		if out.Tokens, err = a.obs.tokenizer.Tokenize(r.Context(), req, eps); err != nil {
			out.Error = "the picker cannot tokenize it: " + err.Error()
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	if a.obs.view != nil && len(eps) > 0 {
		ms, err := a.obs.view.Match(r.Context(), out.Tokens, eps)
		if err != nil {
			out.Error = "cache lookup: " + err.Error()
		}
		for i, m := range ms {
			out.Matched[eps[i]] = m.Matched
		}
	}
	writeJSON(w, http.StatusOK, out)
}
