#!/usr/bin/env bash
# Runs every Fuzz* target in the module for the given time each (default 10s).
# Usage: scripts/fuzz.sh [DURATION]
#
# Go's fuzzing coordinator sometimes ends a run with "context deadline exceeded" when a
# worker answers late at the deadline on a loaded machine (it saves no failing input then).
# Such a run is tried again, at most twice; a run that finds a crash (and writes it under
# testdata/fuzz/) fails at once.
set -euo pipefail
t=${1:-10s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
  for f in $(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' "$dir"/*_test.go 2>/dev/null | awk '{print $2}' | sort -u); do
    for try in 1 2 3; do
      if [ "$try" = 1 ]; then echo "fuzz: $pkg $f for $t"; else echo "fuzz: $pkg $f for $t (try $try)"; fi
      if go test -run '^$' -fuzz "^${f}\$" -fuzztime "$t" "$pkg" 2>&1 | tee "$log"; then
        break
      fi
      if [ "$try" = 3 ] || ! grep -q 'context deadline exceeded' "$log" || grep -q 'Failing input written to' "$log"; then
        exit 1
      fi
      echo "fuzz: $pkg $f: the fuzzing coordinator timed out without a failing input; trying again"
    done
  done
done
