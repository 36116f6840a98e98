#!/usr/bin/env bash
# Runs every Fuzz* target in the module for the given time each (default 10s).
# Usage: scripts/fuzz.sh [DURATION]
set -euo pipefail
t=${1:-10s}
go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
  for f in $(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' "$dir"/*_test.go 2>/dev/null | awk '{print $2}' | sort -u); do
    echo "fuzz: $pkg $f for $t"
    go test -run '^$' -fuzz "^${f}\$" -fuzztime "$t" "$pkg"
  done
done
