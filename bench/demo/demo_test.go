package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunRefusesBadSettings(t *testing.T) {
	good := Config{Arms: "kvaware", Requests: 1, Rate: 1, Tokens: 1, Timeout: time.Second}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no requests", func(c *Config) { c.Requests = 0 }, "must be positive"},
		{"negative warm-up", func(c *Config) { c.Warmup = -1 }, "not negative"},
		{"unknown arm", func(c *Config) { c.Arms = "fastest" }, "fastest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			var out bytes.Buffer
			err := Run(context.Background(), c, &out, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("Run printed before refusing: %q", out.String())
			}
		})
	}
}

// The held picker's admin token is shown for a pasteable check command unless it is the
// user's own LOADAWARE_ADMIN_TOKEN.
func TestPrintHoldShowsOnlyAGeneratedToken(t *testing.T) {
	for _, own := range []bool{false, true} {
		var b bytes.Buffer
		printHold(&b, "kvaware", "http://m", "http://g", "s3cret", own)
		shown := strings.Contains(b.String(), "LOADAWARE_ADMIN_TOKEN=s3cret loadaware-epp check -metrics http://m -gateway http://g")
		if shown == own {
			t.Errorf("own token %v: token shown %v:\n%s", own, shown, b.String())
		}
		if !strings.Contains(b.String(), "check -metrics http://m -gateway http://g") {
			t.Errorf("no check command:\n%s", b.String())
		}
	}
}
