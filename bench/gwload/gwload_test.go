package gwload

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestRunReportsEveryStep(t *testing.T) {
	var out, errOut bytes.Buffer
	c := Config{Rates: []float64{50, 100}, Duration: 200 * time.Millisecond, Sequential: 20, BodyBytes: 8192, Prompt: "ids",
		Engines: 2, Policy: "loadaware", Mode: "full-duplex", Limit: 2 * time.Millisecond, Seed: 1}
	if err := Run(context.Background(), c, &out, &errOut); err != nil {
		t.Fatalf("gwload: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{`(?m)^\s*sequential\s+20\s+0\s`, `(?m)^\s*50 req/s\s+\d+\s+0\s`, `(?m)^\s*100 req/s\s+\d+\s+0\s`,
		`in-flight count at the end: 0\.`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("gwload output does not match %q:\n%s", want, out.String())
		}
	}
}

func TestRunRefusesBadSettings(t *testing.T) {
	good := Config{Rates: []float64{50}, Duration: time.Second, BodyBytes: 64, Prompt: "text", Engines: 1, Mode: "full-duplex", Limit: time.Millisecond}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no rates", func(c *Config) { c.Rates = nil }, "-rates"},
		{"small body", func(c *Config) { c.BodyBytes = 10 }, "-body-bytes at least 64"},
		{"no engines", func(c *Config) { c.Engines = 0 }, "-engines"},
		{"prompt", func(c *Config) { c.Prompt = "words" }, `-prompt "words"`},
		{"body mode", func(c *Config) { c.Mode = "streamed" }, "streamed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := Run(context.Background(), c, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
