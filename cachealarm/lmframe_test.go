package cachealarm

import (
	"testing"

	"github.com/loadaware/loadaware-epp/lmcache"
)

func encode(t testing.TB, m lmcache.Message) []byte {
	t.Helper()
	b, err := lmcache.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLMCacheCacheEvents(t *testing.T) {
	reg := lmcache.RegisterMsg{InstanceID: "i", WorkerID: 0, IP: "10.0.0.1", Port: 1}
	admit := lmcache.KVAdmitMsg{InstanceID: "i", WorkerID: 0, Key: 42, Location: "LocalCPUBackend"}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   int
	}{
		{"an admit", [][]byte{encode(t, admit)}, 1},
		{"a registration and a heartbeat are not cache events",
			[][]byte{encode(t, reg), encode(t, lmcache.HeartbeatMsg(reg))}, 0},
		{"a batch of admits and a register", [][]byte{encode(t, reg), encode(t, admit), encode(t, admit)}, 2},
		{"a JSON admit", [][]byte{[]byte(`{"instance_id":"i","type":"KVAdmitMsg","key":1}`)}, 1},
		{"garbage", [][]byte{{0x81, 0xa4, 't', 'y'}, []byte("{"), nil}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LMCacheCacheEvents(tc.frames); got != tc.want {
				t.Fatalf("LMCacheCacheEvents = %d, want %d", got, tc.want)
			}
		})
	}
}

// FuzzLMCacheCacheEvents: any frame is read without a crash, and a frame counts exactly
// when lmcache.Decode reads it as a message reporting cache contents.
func FuzzLMCacheCacheEvents(f *testing.F) {
	f.Add(encode(f, lmcache.KVAdmitMsg{InstanceID: "i", Key: 1, Location: "L"}))
	f.Add(encode(f, lmcache.KVEvictMsg{InstanceID: "i", Key: 1, Location: "L"}))
	f.Add(encode(f, lmcache.RegisterMsg{InstanceID: "i", IP: "1.2.3.4"}))
	f.Add([]byte(`{"type":"FullSyncEndMsg"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		got := LMCacheCacheEvents([][]byte{frame})
		msg, err := lmcache.Decode(frame)
		if err != nil {
			return // an undecodable frame is never applied: what the peek says does not matter
		}
		if want := lmcacheCacheTags[msg.Tag()]; (got == 1) != want {
			t.Fatalf("LMCacheCacheEvents = %d for a %s", got, msg.Tag())
		}
	})
}
