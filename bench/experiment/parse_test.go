package experiment

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/bench/internal/errcheck"
	"github.com/loadaware/loadaware-epp/scoring"
)

func TestParseArms(t *testing.T) {
	tests := []struct {
		in      string
		want    []Arm
		wantErr string
	}{
		{"all", DefaultArms(), ""},
		{"kvaware,loadaware-b0.5", []Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "loadaware-b0.5", Policy: "loadaware", Beta: 0.5}}, ""},
		{"loadaware:0.75", []Arm{{Name: "loadaware-b0.75", Policy: "loadaware", Beta: 0.75}}, ""},
		{"loadaware", []Arm{{Name: "loadaware-b1", Policy: "loadaware", Beta: 1}}, ""},
		{"session", []Arm{{Name: "session", Policy: "session", Beta: 1}}, ""},
		{"leastload:2,leastload:0.5", []Arm{{Name: "leastload-b2", Policy: "leastload", Beta: 2}, {Name: "leastload-b0.5", Policy: "leastload", Beta: 0.5}}, ""},
		{"gie,kvaware", []Arm{{Name: "gie", Policy: PolicyGIE}, {Name: "kvaware", Policy: "kvaware"}}, ""},
		{"loadaware-b1+residency,latencyaware+residency", []Arm{{Name: "loadaware-b1+residency", Policy: "loadaware", Beta: 1, Residency: true},
			{Name: "latencyaware+residency", Policy: "latencyaware", Beta: 1, Residency: true}}, ""},
		{"gie+residency", []Arm{{Name: "gie+residency", Policy: PolicyGIE, Residency: true}}, ""},
		{"kvaware+residency+residency", nil, "applies once"},
		{"loadaware-b1+ranks,latencyaware+residency+ranks", []Arm{{Name: "loadaware-b1+ranks", Policy: "loadaware", Beta: 1, Ranks: true},
			{Name: "latencyaware+residency+ranks", Policy: "latencyaware", Beta: 1, Residency: true, Ranks: true}}, ""},
		{"kvaware+ranks+ranks", nil, "applies once"},
		{"gie+ranks", nil, "a policy of ours"},
		{"loadaware-b1+ranks+scraped", []Arm{{Name: "loadaware-b1+ranks+scraped", Policy: "loadaware", Beta: 1, Ranks: true, ScrapedRanks: true}}, ""},
		{"kvaware+scraped", nil, "after +ranks"},
		{"kvaware+ranks+scraped+scraped", nil, "applies once"},
		{"fast+residency", nil, `unknown policy "fast"`},
		{"gie:1", nil, `unknown policy "gie"`},
		{"fastest", nil, `unknown policy "fastest"`},
		{"loadaware:x", nil, `beta "x" is not a number`},
		{"loadaware:-1", nil, "out of range"},
		{" , ", nil, "-arms is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseArms(tc.in)
			if errcheck.Done(t, err, tc.wantErr) {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSeeds(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint64
		wantErr string
	}{
		{"7", []uint64{7}, ""},
		{"1-4", []uint64{1, 2, 3, 4}, ""},
		{"18446744073709551614-18446744073709551615", []uint64{18446744073709551614, 18446744073709551615}, ""},
		{"3, 9,1", []uint64{3, 9, 1}, ""},
		{"4-1", nil, "a range is A-B with A <= B"},
		{"1,1", nil, "seed 1 appears twice"},
		{"x", nil, `"x" is not a seed`},
		{"", nil, `"" is not a seed`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSeeds(tc.in)
			if errcheck.Done(t, err, tc.wantErr) {
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ParseSeeds(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzParseArms: any text gives arms with unique-or-not names and known policies, or an
// error; never a crash, never an empty list without an error.
func FuzzParseArms(f *testing.F) {
	for _, s := range []string{"all", "kvaware,loadaware-b0.5", "loadaware:0.75", "latencyaware:2", " , ", "loadaware:x", "loadaware:-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		arms, err := ParseArms(s)
		if err != nil {
			return
		}
		if len(arms) == 0 {
			t.Fatalf("ParseArms(%q) gave no arms and no error", s)
		}
		for _, a := range arms {
			if a.Name == "" || !slices.Contains(scoring.Names, a.Policy) {
				t.Fatalf("ParseArms(%q) gave arm %+v", s, a)
			}
		}
	})
}

// FuzzParseSeeds: any text gives distinct seeds or an error; a range of A-B gives
// B-A+1 seeds in order.
func FuzzParseSeeds(f *testing.F) {
	for _, s := range []string{"7", "1-20", "3, 9,1", "4-1", "1,1", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		seeds, err := ParseSeeds(s)
		if err != nil {
			return
		}
		if len(seeds) == 0 {
			t.Fatalf("ParseSeeds(%q) gave no seeds and no error", s)
		}
		seen := map[uint64]bool{}
		for _, v := range seeds {
			if seen[v] {
				t.Fatalf("ParseSeeds(%q) gave seed %d twice", s, v)
			}
			seen[v] = true
		}
	})
}
