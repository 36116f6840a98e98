package main

import (
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/internal/flagdoc"
)

// TestFlagsDocMatchesHelp checks docs/flags.md against the binary: every command `help` lists
// has a section, every flag its -h prints has a row, and every row is a flag -h prints. Each
// failure names the command and the flag to add to or remove from docs/flags.md.
func TestFlagsDocMatchesHelp(t *testing.T) {
	problems, err := flagdoc.CheckFile("../../docs/flags.md", "loadaware-epp", func(args ...string) string {
		var out, errb strings.Builder
		run(args, strings.NewReader(""), &out, &errb)
		return out.String() + errb.String()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
