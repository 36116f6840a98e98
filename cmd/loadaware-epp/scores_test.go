package main

import "testing"

func TestEndpointScoresFlag(t *testing.T) {
	tests := []struct {
		args     []string
		wantOmit bool
	}{
		{[]string{"--endpoints", "10.0.0.1:8000"}, false},
		{[]string{"--endpoints", "10.0.0.1:8000", "--endpoint-scores=false"}, true},
		{[]string{"--endpoints", "10.0.0.1:8000", "--endpoint-scores=true"}, false},
	}
	for _, tt := range tests {
		cfg, _, err := parse(tt.args, env())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OmitScores != tt.wantOmit {
			t.Errorf("parse(%v): OmitScores = %v, want %v", tt.args, cfg.OmitScores, tt.wantOmit)
		}
	}
}
