# cairn: the two commands are `make run` and `make test`. `make help` lists the rest.
GO      ?= go
BIN     := bin/cairn
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
VENV    := .venv
# Packages fast enough to run under the race detector in CI.
RACE_PKGS := ./internal/errors/... ./internal/lifecycle/... ./internal/store/... ./internal/sigv4/... ./internal/checksum/... ./internal/s3api/... ./internal/server/... ./internal/bench \
             ./internal/hlc/... ./internal/placement/... ./internal/policy/... ./internal/erasure/... ./internal/clustermap/... ./internal/rpc/... ./internal/replica/... ./internal/wire/... ./internal/object/... ./internal/metrics/... ./internal/gateway/... ./internal/topology/... ./internal/stripe/... ./internal/hints/... ./internal/repair/... \
             ./internal/proc/... ./internal/testutil/... ./internal/console/... ./internal/nbd/... ./internal/volume/... \
             ./internal/access/... ./internal/budget/... ./internal/nodetls/... ./internal/secrets/... ./internal/sse/... ./internal/notify/... ./internal/mdc/... ./internal/tier/...
FUZZTIME ?= 4s
FUZZFLAGS ?=
SOAK_DURATION ?= 10m
SOAK_SEED ?=
# Linters live in .tools, pinned; `make tools` installs them when missing.
TOOLS               := $(CURDIR)/.tools
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(TOOLS)/staticcheck
# A suite's recipe runs its _NAME target through .ci/timed, which prints "suite NAME: N s".
SUITE = +@$(CURDIR)/.ci/timed $@ $(MAKE) --no-print-directory _$@

.PHONY: help build run test test-short test-race test-long test-e2e test-soak test-python fuzz bench soak lint tools \
        deps deps-python deps-apt clean _lint _test-race _test-long _test-soak _test-python _fuzz

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/cairn
	@mkdir -p $(dir $(BIN))
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN).tmp.$$$$ ./cmd/cairn && mv $(BIN).tmp.$$$$ $(BIN)

run: build ## start a single-node cairn: S3 on 127.0.0.1:9000, block volumes over NBD on 127.0.0.1:10809, data in ./data
	./$(BIN) server --data ./data --listen 127.0.0.1:9000 --admin-listen 127.0.0.1:9001 --node-addr 127.0.0.1:9002 --nbd-listen 127.0.0.1:10809

# At most two suites at a time, one per core, longest first: make starts the next suite on
# the list whenever one ends (lint, the race tests and the fuzzers keep a core busy; the
# process-level suites mostly wait on their clusters). The fuzzers run one worker each:
# the other core is the other suite's. Each suite prints its timing line; a failure fails
# the run.
# The suites' prerequisites (build, deps-python) are made first, by `test` itself: a suite
# waiting on one would let the shorter ones after it start first.
TEST_SUITES := test-long test-race fuzz test-soak test-python lint
SUITE_DEPS  ?= build
test: deps build ## install test tools and run every suite (two at once), one timing line per suite
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory -j2 $(TEST_SUITES) FUZZFLAGS=-test.parallel=1 SUITE_DEPS= && \
	echo "make test: all suites passed in $$(( $$(date +%s) - start )) s"

test-short: ## the fast loop: every package's tests with -short (no process-level test), well under 2 minutes
	$(GO) test -short ./...

lint: tools ## gofmt, go vet and staticcheck (pinned in .tools)
	$(SUITE)
_lint:
	@out=$$(gofmt -l cmd internal tools 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

tools: ## install the pinned staticcheck into .tools if it is missing (or another version)
	@$(STATICCHECK) -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION:v%=%))' || { \
	  echo "installing staticcheck $(STATICCHECK_VERSION) into .tools"; \
	  GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }

test-race: ## unit and API tests under the race detector
	$(SUITE)
_test-race:
	$(GO) test -race -count=1 $(RACE_PKGS)

test-long: $(SUITE_DEPS) ## the long tier: process-level tests (crash safety, memory, clusters, the binary, the tools), chart rendering and the browser tests, without the race detector
	$(SUITE)
_test-long:
	CAIRN_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m ./cmd/... ./tools/... ./internal/bench/plot
	$(GO) test -count=1 -run 'Alloc' ./internal/erasure/ ./internal/policy/ # allocation bounds: skipped under -race, so run here
	$(GO) test -count=1 -run 'TestPowerCut|TestJournalPowerCut|TestFormatV1' ./internal/store/ # the full power-cut tests (short under -race)
	$(GO) test -count=1 -run 'TestECPowerCut' ./internal/volume/ # the full erasure-coded volume power-cut test (short under -race)
	$(GO) test -count=1 -run 'TestBrowser' ./internal/s3api/ # headless Chromium: POST forms and CORS (skipped under -race and -short)

test-e2e: test-long # the long tier's former name

test-soak: $(SUITE_DEPS) ## the fault soak, short form (45 s of kills, pauses and full disks under load, then 20 s on a versioned bucket; about 3 minutes)
	$(SUITE)
_test-soak:
	$(GO) run ./tools/soak --cairn $(BIN) --duration 45s
	$(GO) run ./tools/soak --cairn $(BIN) --duration 20s --versioned --tmpfs-size 2g

soak: build ## the fault soak (docs/soak.md): SOAK_DURATION=10m of faults under load, SOAK_SEED=N repeats a run
	$(GO) run ./tools/soak --cairn $(BIN) --duration $(SOAK_DURATION) $(if $(SOAK_SEED),--seed $(SOAK_SEED))

# Each package with fuzz targets is built once, instrumented (go test -c -fuzz), and its
# test binary runs every target in turn from the package directory, so the seed corpora
# in testdata/fuzz are found and a failing input is written there, as go test -fuzz does.
# A run that fails with a bare "context deadline exceeded" and writes no failing input is
# Go 1.26's fuzz-coordinator race at the -fuzztime deadline (go.dev/issue/75804), not a
# finding: it is reported and the target run again (up to three runs: under load it can
# hit twice in a row); any failing input fails the build.
fuzz: ## run every fuzz target briefly (FUZZTIME=4s each), seeded from the table tests
	$(SUITE)
_fuzz:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; cache=$$($(GO) env GOCACHE)/fuzz; \
	for dir in $$(grep -l '^func Fuzz' $$(find internal -name '*_test.go') | xargs -n1 dirname | sort -u); do \
	  pkg=$$($(GO) list ./$$dir); bin=$$tmp/$$(echo $$dir | tr / _).test; \
	  $(GO) test -c -fuzz=. -o $$bin ./$$dir; \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | sed 's/^func //'); do \
	    echo "fuzz $$f ($$pkg, $(FUZZTIME))"; \
	    for try in 1 2 3; do \
	      if (cd $$dir && $$bin -test.run='^$$' -test.fuzz="^$$f$$" -test.fuzztime=$(FUZZTIME) -test.fuzzcachedir=$$cache/$$pkg $(FUZZFLAGS)) > $$tmp/log 2>&1; then break; fi; \
	      if grep -q 'context deadline exceeded' $$tmp/log && ! grep -q 'Failing input written' $$tmp/log && [ $$try != 3 ]; then \
	        echo "  $$f: fuzz coordinator deadline race (go.dev/issue/75804), no failing input: running it again"; continue; fi; \
	      cat $$tmp/log; exit 1; \
	    done; \
	  done; \
	done

test-python: $(SUITE_DEPS) $(if $(SUITE_DEPS),deps-python) ## boto3, aws cli and rclone against a real server
	$(SUITE)
_test-python:
	CAIRN_BIN=$(CURDIR)/$(BIN) PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m pytest -q tests/python

deps: deps-apt deps-python tools ## install test tools (Go modules, staticcheck, pip and apt packages)
	$(GO) mod download

deps-python:
	@test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	@$(VENV)/bin/pip install -q -r tests/python/requirements.txt

deps-apt:
	@missing=""; for t in curl:curl rclone:rclone promtool:prometheus chromium:chromium openssl:openssl qemu-img:qemu-utils nbdinfo:libnbd-bin fio:fio redis-server:redis-server ip:iproute2; do cmd=$${t%%:*}; pkg=$${t##*:}; command -v $$cmd >/dev/null || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi; fi

bench: build ## performance figures (docs/benchmarks.md): cairn vs a bare net/http server, listing, cluster, recovery, engine
	$(GO) run ./tools/s3bench --cairn $(BIN) --hot-large 64
	$(GO) run ./tools/listbench --cairn $(BIN) --objects 100000
	$(GO) run ./tools/clusterbench --cairn $(BIN) --duration 10s
	$(GO) run ./tools/recoverybench --cairn $(BIN)
	$(GO) test -run '^$$' -bench . -benchtime 3s ./internal/store/ ./internal/sigv4/ ./internal/checksum/ ./internal/rpc/ ./internal/placement/
	$(GO) test -run '^$$' -bench '4KiB' -benchtime 200x ./internal/gateway/
	$(GO) test -run '^$$' -bench 'BenchmarkClass|BenchmarkApply' -benchtime 5x ./internal/gateway/

clean: ## remove build output and installed tools (not ./data)
	rm -rf bin $(VENV) $(TOOLS)
