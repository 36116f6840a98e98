package errcheck

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that records a failure instead of stopping.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatal(...any)          { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestDone(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		want       string
		done, fail bool
	}{
		{"no error wanted, none", nil, "", false, false},
		{"no error wanted, one", errors.New("boom"), "", false, true},
		{"error wanted and named", errors.New("rate -1: must be positive"), "must be positive", true, false},
		{"error wanted, none", nil, "must be positive", true, true},
		{"error wanted, another", errors.New("boom"), "must be positive", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			if done := Done(r, tt.err, tt.want); done != tt.done || r.failed != tt.fail {
				t.Errorf("Done = %v with failure %v, want %v with failure %v", done, r.failed, tt.done, tt.fail)
			}
		})
	}
}
