package kvevents

import "testing"

func TestTracker(t *testing.T) {
	tests := []struct {
		name    string
		applied int64
		live    int64
		seq     int64
		want    verdict
	}{
		{"nothing seen", -1, -1, 5, vFirst},
		{"the next one", 4, 4, 5, vNext},
		{"after a replay, the next one", 9, -1, 10, vNext},
		{"after a replay, one it applied", 9, -1, 7, vDuplicate},
		{"a jump", 4, 4, 7, vGap},
		{"back to zero", 9, 9, 0, vReset},
		{"the same number again", 9, 9, 9, vReset},
	}
	for _, tc := range tests {
		tr := tracker{applied: tc.applied, live: tc.live}
		if got := tr.classifyLive(tc.seq); got != tc.want {
			t.Errorf("%s: classifyLive(%d) = %v, want %v", tc.name, tc.seq, got, tc.want)
		}
		if tr.live < tc.seq {
			t.Errorf("%s: live = %d after seeing %d", tc.name, tr.live, tc.seq)
		}
	}
}
