package experiment

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/loadaware/loadaware-epp/scoring"
)

// RecommendedPolicy is the policy the README's "Which policy" paragraph recommends;
// the arm "recommended" is it at the default beta. A test holds the two together.
const RecommendedPolicy = "ttftaware"

// ParseArms reads a list of arms as the commands' -arms flag takes it: "all"
// (DefaultArms), or comma-separated names of DefaultArms, policies (scoring.Names)
// or policy:beta ("loadaware:0.75" is the arm loadaware-b0.75), or PolicyGIE
// (the arm gie, virtual time only). A policy arm's name may end in
// ResidencySuffix: the arm then weighs the engines' LoRA adapters (gie+residency:
// GIE's default profile plus its lora-affinity-scorer), then in RanksSuffix: the
// arm tells the engines' data-parallel ranks apart; or "recommended"
// (RecommendedPolicy).
func ParseArms(s string) ([]Arm, error) {
	if strings.TrimSpace(s) == "all" {
		return DefaultArms(), nil
	}
	var out []Arm
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		arm, err := parseArm(item)
		if err != nil {
			return nil, err
		}
		out = append(out, arm)
	}
	if len(out) == 0 {
		return nil, errors.New("-arms is empty: name at least one arm, e.g. -arms kvaware,loadaware-b1")
	}
	return out, nil
}

func parseArm(item string) (Arm, error) {
	if item == "recommended" {
		item = RecommendedPolicy
	}
	for _, m := range []struct {
		suffix, rule string
		refused      func(Arm) bool
		set          func(*Arm)
	}{
		{ScrapedSuffix, "once, after " + RanksSuffix, func(a Arm) bool { return !a.Ranks || a.ScrapedRanks }, func(a *Arm) { a.ScrapedRanks = true }},
		{RanksSuffix, "once, to a policy of ours", func(a Arm) bool { return a.Ranks || a.Policy == PolicyGIE }, func(a *Arm) { a.Ranks = true }},
		{ResidencySuffix, "once", func(a Arm) bool { return a.Residency }, func(a *Arm) { a.Residency = true }},
	} {
		base, ok := strings.CutSuffix(item, m.suffix)
		if !ok {
			continue
		}
		arm, err := parseArm(base)
		switch {
		case err != nil:
			return Arm{}, err
		case m.refused(arm):
			return Arm{}, fmt.Errorf("arm %q: %s applies %s", item, m.suffix, m.rule)
		}
		m.set(&arm)
		arm.Name += m.suffix
		return arm, nil
	}
	for _, a := range DefaultArms() {
		if a.Name == item {
			return a, nil
		}
	}
	if item == PolicyGIE {
		return Arm{Name: PolicyGIE, Policy: PolicyGIE}, nil
	}
	policy, betaText, hasBeta := strings.Cut(item, ":")
	if !slices.Contains(scoring.Names, policy) {
		return Arm{}, fmt.Errorf("arm %q: unknown policy %q: use one of %s, optionally with :beta (loadaware:0.75), or %s (GIE's own scheduler, virtual time only)", item, policy, strings.Join(scoring.Names, ", "), PolicyGIE)
	}
	beta := scoring.DefaultParams().Beta
	if hasBeta {
		b, err := strconv.ParseFloat(betaText, 64)
		if err != nil {
			return Arm{}, fmt.Errorf("arm %q: beta %q is not a number", item, betaText)
		}
		if err := scoring.ValidateBeta(b); err != nil {
			return Arm{}, fmt.Errorf("arm %q: %w", item, err)
		}
		beta = b
	}
	name := policy
	if policy == "loadaware" || hasBeta { // a beta given to another policy (latencyaware:2) names its arm too
		name = policy + "-b" + strconv.FormatFloat(beta, 'g', -1, 64)
	}
	return Arm{Name: name, Policy: policy, Beta: beta}, nil
}

// SeedRange returns the seeds a, a+1, ..., b (none when b < a).
func SeedRange(a, b uint64) []uint64 {
	var out []uint64
	for v := a; v <= b && v >= a; v++ {
		out = append(out, v)
	}
	return out
}

// ParseSeeds reads a list of seeds as the -seeds flag takes it: "7", "1-20" or
// "1,4,9" (each seed once).
func ParseSeeds(s string) ([]uint64, error) {
	s = strings.TrimSpace(s)
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		b, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 64)
		if err1 != nil || err2 != nil || b < a || b-a >= 100000 {
			return nil, fmt.Errorf("-seeds %q: a range is A-B with A <= B (at most 100000 seeds)", s)
		}
		return SeedRange(a, b), nil
	}
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-seeds %q: %q is not a seed: use N, A-B or a comma-separated list", s, part)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("-seeds %q: seed %d appears twice", s, v)
		}
		out = append(out, v)
	}
	return out, nil
}
