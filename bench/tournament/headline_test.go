package tournament

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/internal/doccheck"
)

// headlineTable is the README's headline table: the arm of each ratio
// column and each profile's row cells, in order.
type headlineTable struct {
	arms []string
	rows [][]string
}

// readHeadline finds the table whose header starts "| profile | best TTFT
// p95 (s) |" and returns it; a column's arm is the first word of its header.
func readHeadline(path string) (headlineTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return headlineTable{}, err
	}
	defer f.Close()
	var t headlineTable
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		cells := doccheck.Cells(line)
		switch {
		case !in && len(cells) > 2 && cells[0] == "profile" && cells[1] == "best TTFT p95 (s)":
			in = true
			for _, c := range cells[2:] {
				t.arms = append(t.arms, strings.Fields(c)[0])
			}
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			t.rows = append(t.rows, cells)
		case in:
			return t, sc.Err()
		}
	}
	if !in {
		return t, fmt.Errorf("%s has no headline table (a header row \"| profile | best TTFT p95 (s) | ...\")", path)
	}
	return t, sc.Err()
}

// headlineRow is what the README's row for p must say, from the tournament
// JSON: the best median TTFT p95 and its arm, then each arm's median over the
// best's to two decimals, " *t*" when its paired test is tied.
func headlineRow(p jsonProfile, arms []string) ([]string, error) {
	verdict := map[string]string{}
	for _, t := range p.Tests {
		verdict[t.Arm] = t.Verdict
	}
	b, err := p.p95(p.Best)
	if err != nil {
		return nil, err
	}
	row := []string{p.Name, fmt.Sprintf("%.3f %s", b, p.Best)}
	for _, name := range arms {
		a, err := p.p95(name)
		if err != nil {
			return nil, err
		}
		cell := fmt.Sprintf("%.2f", a/b)
		if name != p.Best && verdict[name] == VerdictTied {
			cell += " *t*"
		}
		row = append(row, cell)
	}
	return row, nil
}

// p95 is arm's median TTFT p95 on profile p, or an error naming both when the
// results hold none.
func (p jsonProfile) p95(arm string) (float64, error) {
	for _, a := range p.Arms {
		if a.Arm == arm && a.Medians["ttft_p95"] != nil {
			return *a.Medians["ttft_p95"], nil
		}
	}
	return 0, fmt.Errorf("profile %s: arm %q has no median TTFT p95", p.Name, arm)
}

// sameCell compares a README cell with the computed one: the text after the
// number exactly, the number within six tenths of its last digit (rounding)
// plus the JSON's rounding of the medians to 6 significant digits.
func sameCell(got, want string) bool {
	gn, grest, _ := strings.Cut(got, " ")
	wn, wrest, _ := strings.Cut(want, " ")
	g, err1 := strconv.ParseFloat(gn, 64)
	w, err2 := strconv.ParseFloat(wn, 64)
	if err1 != nil || err2 != nil || grest != wrest {
		return got == want
	}
	decimals := 0
	if i := strings.IndexByte(wn, '.'); i >= 0 {
		decimals = len(wn) - i - 1
	}
	return math.Abs(g-w) <= 0.6*math.Pow(10, -float64(decimals))+1e-5*math.Abs(w)
}

// readResults reads a results file the Makefile writes into docs/bench.
func readResults(t *testing.T, name string) jsonResult {
	t.Helper()
	data, err := os.ReadFile("../../docs/bench/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var res jsonResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("docs/bench/%s: %v", name, err)
	}
	return res
}

// TestReadmeHeadlineMatchesTournament holds the README's headline table to
// docs/bench/tournament.json (written by `make tournament`): one row per
// profile in the run's order, each best arm, ratio and tie as the run says.
// When it fails, regenerate the table from the JSON: the messages give each
// row as it must read.
func TestReadmeHeadlineMatchesTournament(t *testing.T) {
	res := readResults(t, "tournament.json")
	table, err := readHeadline("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(table.rows) != len(res.Profiles) {
		t.Errorf("README headline has %d rows, docs/bench/tournament.json %d profiles: one row per profile", len(table.rows), len(res.Profiles))
	}
	for i, p := range res.Profiles {
		want, err := headlineRow(p, table.arms)
		if err != nil {
			t.Fatal(err)
		}
		line := "| " + strings.Join(want, " | ") + " |"
		if i >= len(table.rows) {
			t.Errorf("README headline lacks row %d: %s", i+1, line)
			continue
		}
		got := table.rows[i]
		ok := len(got) == len(want)
		for j := 0; ok && j < len(want); j++ {
			ok = sameCell(got[j], want[j])
		}
		if !ok {
			t.Errorf("README headline row %d reads\n\t| %s |\nthe tournament says\n\t%s", i+1, strings.Join(got, " | "), line)
		}
	}
}

func TestSameCell(t *testing.T) {
	tests := []struct {
		got, want string
		same      bool
	}{
		{"1.00", "1.00", true},
		{"1.01", "1.00", false},
		{"1.02 *t*", "1.02", false},
		{"1.02 *t*", "1.02 *t*", true},
		{"0.222 latencyaware", "0.218 ttftaware", false},
		{"0.218 latencyaware", "0.218 ttftaware", false},
		{"0.218 ttftaware", "0.218 ttftaware", true},
		{"304.20", "304.20", true},
		{"published", "published", true},
		{"published", "rate20", false},
	}
	for _, tc := range tests {
		if got := sameCell(tc.got, tc.want); got != tc.same {
			t.Errorf("sameCell(%q, %q) = %v, want %v", tc.got, tc.want, got, tc.same)
		}
	}
}

// TestReadmeHoldoutRowMatchesHoldout holds the README's row for the `make
// holdout` draw to docs/bench/holdout.md and holdout.json: the counts the
// report states, and the candidate's geometric mean and worst ratio to each
// profile's best median TTFT p95.
func TestReadmeHoldoutRowMatchesHoldout(t *testing.T) {
	md, err := os.ReadFile("../../docs/bench/holdout.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`(\\S+)` is best or tied on (\\d+) of (\\d+) profiles and meets the 2% rule on (\\d+) of").FindSubmatch(md)
	if m == nil {
		t.Fatal("docs/bench/holdout.md states no \"is best or tied on N of M profiles\" line")
	}
	cand := string(m[1])
	res := readResults(t, "holdout.json")
	sum, worst, worstName := 0.0, 0.0, ""
	for _, p := range res.Profiles {
		c, err := p.p95(cand)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.p95(p.Best)
		if err != nil {
			t.Fatal(err)
		}
		r := c / b
		sum += math.Log(r)
		if r > worst {
			worst, worstName = r, p.Name
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row []string
	for _, line := range strings.Split(string(readme), "\n") {
		if c := doccheck.Cells(line); c != nil && strings.Contains(line, "(`make holdout`)") {
			row = c
		}
	}
	if len(row) < 5 {
		t.Fatal("README has no held-out table row naming (`make holdout`) with 5 cells")
	}
	want := []string{
		fmt.Sprintf("%s of %s", m[2], m[3]),
		string(m[4]),
		fmt.Sprintf("%.2fx", math.Exp(sum/float64(len(res.Profiles)))),
		fmt.Sprintf("%.2fx (%s", worst, worstName),
	}
	got := []string{strings.Trim(row[1], "*"), strings.Trim(row[2], "*"), strings.Trim(row[3], "*"), strings.Trim(row[4], "*")}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("README `make holdout` row cell %d reads %q; docs/bench/holdout.{md,json} say %q", i+2, got[i], want[i])
		}
	}
}
