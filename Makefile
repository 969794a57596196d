# Skein. `make help` lists the targets.
#
# The repository is a go.work workspace with no root module: packages are
# named with the `work` pattern, not ./... .

GO        ?= go
BIN       ?= bin
DATA      ?= .skein
HTTP      ?= 127.0.0.1:8080
# -timeout bounds one package's test binary, a guard against a hang, not
# the run's budget: the end-to-end package takes about 11 minutes alone on
# two cores, and near 15 beside another make test.
TEST_FLAGS ?= -race -shuffle=on -count=1 -timeout=20m
# The packages whose tests take longest, named before the rest: go test
# starts test binaries in the order it is given them, two at a time on two
# cores, and the end-to-end package alone takes most of the run. Started
# last, it ran alone for minutes at the end; started first, the others
# share the second slot beside it.
TEST_FIRST ?= skein.dev/test skein.dev/services/session skein.dev/services/gateway
BENCH     ?= .
BENCH_TIME ?= 2s
BENCH_COUNT ?= 3
FUZZ_TIME ?= 20s
# The real ACP adapters the sandbox tests run (make real-adapters); the
# tests skip, saying so, where they are not installed.
REAL_ADAPTERS ?= $(CURDIR)/.cache/real-adapters
export SKEIN_REAL_ADAPTERS ?= $(REAL_ADAPTERS)
# The official ACP TypeScript SDK, the client of the ACP door's tests
# (make acp-sdk); they skip, saying so, where it is not installed.
ACP_SDK ?= $(CURDIR)/.cache/acp-sdk
export SKEIN_ACP_SDK ?= $(ACP_SDK)

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@# Two passes over the targets: the names' column is as wide as the longest.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {n++; name[n] = $$1; what[n] = $$2; if (length($$1) > w) w = length($$1)} \
	  END {for (i = 1; i <= n; i++) printf "  %-" w "s  %s\n", name[i], what[i]}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/skein and bin/skein-testagent
	$(GO) build -o $(BIN)/skein ./cmd/skein
	$(GO) build -o $(BIN)/skein-testagent ./testagent/cmd/skein-testagent

.PHONY: run
run: build ## run Skein: embedded NATS, all services and the demo agent (skein dev)
	$(BIN)/skein dev --data $(DATA) --http $(HTTP)

# make cluster: three nats-server processes (ops/cluster/nats) and the four
# services as separate skein serve processes, on fixed loopback ports.
CLUSTER_DIR ?= .cluster
CLUSTER_TLS ?= false
CLUSTER_RUNNERS ?= 1
NATS_SERVER_VERSION = $(shell cd cmd/skein && $(GO) list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)

.PHONY: nats-server
nats-server: ## build bin/nats-server from the version go.mod pins (go install)
	GOBIN=$(abspath $(BIN)) GOWORK=off $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)

.PHONY: cluster
cluster: build nats-server ## run Skein as a cluster: 3 NATS nodes, 4 service processes (CLUSTER_DIR, CLUSTER_TLS=true, CLUSTER_RUNNERS=2)
	$(GO) run ./ops/tools/cluster up -dir $(CLUSTER_DIR) -conf ops/cluster/nats -nats-server $(BIN)/nats-server -skein $(BIN)/skein -tls=$(CLUSTER_TLS) -runners=$(CLUSTER_RUNNERS)

.PHONY: cluster-stop
cluster-stop: ## stop the cluster make cluster started (its data stays in CLUSTER_DIR)
	$(GO) run ./ops/tools/cluster down -dir $(CLUSTER_DIR)

.PHONY: test
test: ## unit, embedded-NATS and end-to-end tests, race detector on
	$(GO) test $(TEST_FLAGS) $(TEST_FIRST) work

.PHONY: real-adapters
real-adapters: ## install the real adapters (claude-agent-acp, codex-acp, gemini-cli) the sandbox tests run
	@mkdir -p $(REAL_ADAPTERS)
	cp services/adapter-runner/testdata/real-adapters/package.json services/adapter-runner/testdata/real-adapters/package-lock.json $(REAL_ADAPTERS)/
	cd $(REAL_ADAPTERS) && npm ci --no-audit --no-fund --ignore-scripts

.PHONY: acp-sdk
acp-sdk: ## install the ACP TypeScript SDK the ACP door's tests drive Skein with (test/acp_sdk_test.go)
	@mkdir -p $(ACP_SDK)
	cp test/testdata/acp-sdk/package.json test/testdata/acp-sdk/package-lock.json $(ACP_SDK)/
	cd $(ACP_SDK) && npm ci --no-audit --no-fund --ignore-scripts

.PHONY: test-security
test-security: ## the security suite alone: every attack on tenants, the edge and the sandbox
	$(GO) test $(TEST_FLAGS) -run 'TestSecurity|TestAuthEveryRoute|TestBadInputEveryRoute' work

.PHONY: test-long
test-long: ## the long soak, load and fault runs as well, and the capacity sweep
	SKEIN_LONG=1 $(GO) test $(TEST_FLAGS) -timeout=60m $(TEST_FIRST) work
	@# The capacity sweep measures CPU and latency: no race detector.
	@mkdir -p $(BIN)
	SKEIN_LONG=1 $(GO) test -run='^$$' -bench='^BenchmarkCapacitySweep$$' -benchtime=1x -count=1 -timeout=30m ./test | tee $(BIN)/capacity.txt
	@$(GO) run ./ops/tools/benchtable $(BIN)/capacity.txt | grep -E '^(figure|capacity knee)'

.PHONY: bench
bench: ## run the benchmarks and print the issue figures beside their baselines
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCH_TIME) -count=$(BENCH_COUNT) work | tee bench.txt
	@echo
	@# The whole suite's table is also docs/BENCHMARKS.md, with the date and the machine.
	@$(GO) run ./ops/tools/benchtable $(if $(filter .,$(BENCH)),-md docs/BENCHMARKS.md) bench.txt

.PHONY: bench-smoke
bench-smoke: ## every benchmark once, so none rots
	$(GO) test -run='^$$' -bench=. -benchtime=1x work

.PHONY: fuzz
fuzz: ## a short run of every fuzz target (FUZZ_TIME each, 20s by default)
	@set -e; for pkg in $$($(GO) list -f '{{.Dir}}' work); do \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$pkg/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "== $$t ($$pkg)"; \
	    (cd $$pkg && $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZ_TIME) .); \
	  done; \
	done

.PHONY: lint
lint: ## gofmt, go vet, staticcheck and go fix (modernizers) must be clean
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet work
	$(GO) tool staticcheck work
	@out=$$($(GO) fix -diff work); if [ -n "$$out" ]; then echo "go fix would change:"; echo "$$out" | head -40; exit 1; fi

.PHONY: clean
clean: ## remove build output and the dev data directory
	@# skein dev keeps $(DATA) out of the project, $(DATA) linking to it: remove both.
	if [ -L $(DATA) ]; then rm -rf "$$(readlink $(DATA))"; fi
	rm -rf $(BIN) $(DATA) $(CLUSTER_DIR) bench.txt
