package extload

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestServerMainRefusesBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown kind", []string{"-kind", "envoy"}, `srv: -kind "envoy": use one of do-nothing, pass-through, loadaware-epp`},
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := ServerMain(context.Background(), "srv", tc.args, strings.NewReader(""), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}

// Only the picker's process gets the picker's settings; every server gets its kind, CPU
// and the flight recorder.
func TestServerArgs(t *testing.T) {
	c := Config{ServerProcs: 1, Endpoints: 2, Policy: "loadaware", Profile: "p.out", Trace: "t.out", MemLimit: 1 << 30, GCPercent: 50,
		FlightDir: "f", NoScores: true}
	tests := []struct {
		name string
		cpu  int
		want string
	}{
		{ServerNothing, -1, "-kind do-nothing -procs 1 -endpoints 2 -policy loadaware -tokenizer  -flight"},
		{ServerOurs, 3, "-kind loadaware-epp -procs 1 -endpoints 2 -policy loadaware -tokenizer  -cpu 3 -flight -cpuprofile p.out -trace t.out -memory-limit 1073741824 -gc-percent 50 -endpoint-scores=false"},
	}
	for _, tc := range tests {
		if got := strings.Join(c.serverArgs(tc.name, tc.cpu), " "); got != tc.want {
			t.Errorf("serverArgs(%s, %d) = %q, want %q", tc.name, tc.cpu, got, tc.want)
		}
	}
}
