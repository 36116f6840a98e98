package experiment

import (
	"os"
	"regexp"
	"testing"
)

// TestReadmeRecommendsRecommendedPolicy holds RecommendedPolicy to the README's "Which
// policy" paragraph, whose sentence "We recommend `NAME`" names it.
func TestReadmeRecommendsRecommendedPolicy(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Which policy\n.*?We recommend `([a-z-]+)`").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no \"## Which policy\" section with a sentence \"We recommend `NAME`\"")
	}
	if got := string(m[1]); got != RecommendedPolicy {
		t.Errorf("README recommends %q, RecommendedPolicy is %q: change one of them", got, RecommendedPolicy)
	}
	arms, err := ParseArms("recommended")
	if err != nil || len(arms) != 1 || arms[0].Policy != RecommendedPolicy {
		t.Errorf("ParseArms(recommended) = %+v, %v; want the arm of %s", arms, err, RecommendedPolicy)
	}
}
