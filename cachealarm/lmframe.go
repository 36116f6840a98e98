package cachealarm

import (
	"encoding/json"

	"github.com/tinylib/msgp/msgp"
)

// lmcacheCacheTags are the LMCache worker messages that report cache contents (what an
// engine stores or drops), as opposed to registration and heartbeats.
var lmcacheCacheTags = map[string]bool{"KVAdmitMsg": true, "KVEvictMsg": true, "BatchedKVOperationMsg": true,
	"FullSyncBatchMsg": true, "FullSyncEndMsg": true}

// LMCacheCacheEvents counts the frames of an LMCache worker message batch that report
// cache contents, reading only each frame's "type" (msgpack map, or JSON object when the
// frame starts with '{'). Frames that cannot be read count as none.
func LMCacheCacheEvents(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		if lmcacheCacheTags[string(frameTag(f))] {
			n++
		}
	}
	return n
}

// frameTag is the "type" of one frame, empty when it has none or cannot be read. A
// msgpack frame's tag aliases f.
func frameTag(f []byte) []byte {
	if len(f) > 0 && f[0] == '{' {
		var m struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(f, &m) != nil {
			return nil
		}
		return []byte(m.Type)
	}
	n, b, err := msgp.ReadMapHeaderBytes(f)
	if err != nil {
		return nil
	}
	for range n {
		var k []byte
		if k, b, err = msgp.ReadMapKeyZC(b); err != nil {
			return nil
		}
		if string(k) == "type" {
			v, _, err := msgp.ReadStringZC(b)
			if err != nil {
				return nil
			}
			return v
		}
		if b, err = msgp.Skip(b); err != nil {
			return nil
		}
	}
	return nil
}
