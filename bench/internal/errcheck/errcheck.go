// Package errcheck holds the bench's one check of a table-test case that may
// expect an error, so each table test does not spell it out again.
package errcheck

import (
	"strings"
	"testing"
)

// Done checks err against want and reports whether the case is finished.
// With want set, it fails t unless err names want (contains it) and returns
// true: the case expected an error and got it. With want empty, it fails t
// on any err and returns false: the caller goes on to check the result.
func Done(t testing.TB, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want one containing %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
