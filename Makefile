# kgc — run `make help` for the targets.
GO ?= go

.PHONY: test-bulk help run test test-unit test-integration bench bench-quick bench-cluster bench-go bench-namespaces bench-scale build dist image lint verify soak soak-sim

help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## Run kgc on an embedded control plane (etcd + kube-apiserver), until Ctrl-C.
	$(GO) run ./sandbox/cmd/kgc-sandbox

build: ## Build the kgc binary into bin/.
	GOWORK=off $(GO) build -o bin/kgc ./cmd/kgc

test: ## Run every test (unit + integration), with the race detector: the README's test command, as CI runs it.
	$(GO) test -race -count=1 -p 4 -timeout 60m ./... ./sandbox/...

test-unit: ## Run the root module's unit tests only (fast, no control plane).
	GOWORK=off $(GO) test -race ./...

test-integration: ## Run the integration tests against the sandbox control plane.
	$(GO) test -race ./sandbox/...

BULK_TESTS = DoesNotTrip|TestOwnersGoWithTheirNamespace|TestBacklogAfterLeaderChange
test-bulk: ## The bulk deletions that must never trip the deletion breaker, at full size (a CRD with 10,000 instances, 5,000 owners in one DeleteCollection, namespaces of 5,000 owners, start-up backlogs of 5,000), without the race detector (CI runs them smaller, with it).
	KGC_BULK_FULL=1 $(GO) test -count=1 -timeout 2h -v -run '$(BULK_TESTS)' ./sandbox/integration/breaker/ ./sandbox/integration/namespaces/ ./sandbox/integration/leaderelection/

soak: ## The randomized model-based safety test against the real apiserver, every chaos kind (100 seeds, ~30 min; env: KGC_MODEL_SEEDS=100, KGC_MODEL_OBJECTS=400, KGC_SEED, KGC_MODEL_CHAOS=delay,restart,fail,pages (delay: the watch-lag findings of docs/correctness.md's known limits are counted, not failed, where the record shows the lag), KGC_MODEL_RESTARTS=4). The simulator's soak is soak-sim.
	KGC_MODEL_SEEDS=$${KGC_MODEL_SEEDS:-100} KGC_MODEL_OBJECTS=$${KGC_MODEL_OBJECTS:-400} KGC_MODEL_RESTARTS=$${KGC_MODEL_RESTARTS:-4} \
		KGC_MODEL_CHAOS=$${KGC_MODEL_CHAOS:-delay,restart,fail,pages} \
		$(GO) test -race -count=1 -timeout 4h -v -run '^TestModel$$' ./sandbox/integration/model/

soak-sim: ## Run the deterministic interleaving simulator for many schedules, failing on any violation (CI runs 1000; env: KGC_SIM_SCHEDULES=1000000, KGC_SIM_BASE=1, KGC_SIM_MAXFAIL=5, KGC_SIM_SEED replays one).
	KGC_SIM_SCHEDULES=$${KGC_SIM_SCHEDULES:-1000000} \
		$(GO) test -race -count=1 -timeout 72h -v -run '^TestRandomSchedules$$' ./internal/sim/

BENCH_FLAGS ?=
bench: ## Side-by-side benchmark vs kube-controller-manager's collector (~30 min); table in bin/bench.md.
	mkdir -p bin
	$(GO) run ./sandbox/cmd/kgc-bench --markdown bin/bench.md $(BENCH_FLAGS)

bench-quick: ## The side-by-side benchmark with small sizes and one run (a few minutes).
	$(GO) run ./sandbox/cmd/kgc-bench --quick $(BENCH_FLAGS)

bench-cluster: ## The side-by-side benchmark on a real cluster (Deployments, CronJobs, rollouts; ~30 min); table in bin/bench-cluster.md.
	mkdir -p bin
	$(GO) run ./sandbox/cmd/kgc-bench --cluster --runs 1 --markdown bin/bench-cluster.md $(BENCH_FLAGS)

bench-namespaces: ## Namespace deletion time, kgc's namespace lifecycle vs kube-controller-manager's namespace controller, on the same sandbox cluster (env: KGC_NS_BENCH_SIZES=1000,10000; ~10 min).
	$(GO) test -run '^$$' -bench '^BenchmarkNamespaceDeletion$$' -benchtime 1x -timeout 90m ./sandbox/bench/

SCALE_SIZES ?= 100000,300000,1000000
SCALE_NAMESPACES ?= 256
SCALE_SHARDS ?= 2,4
bench-scale: ## Start-up at scale: bare metadata client (paging, and one streaming list), kgc, upstream (up to 300k), and kgc in SCALE_SHARDS shards of namespaces, on a cluster of SCALE_NAMESPACES namespaces populated to each of SCALE_SIZES objects (default 100k,300k,1M; populating 1M takes about 7 min); table in bin/bench-scale.md.
	mkdir -p bin
	$(GO) run ./sandbox/cmd/kgc-bench --scale $(SCALE_SIZES) --scale-namespaces $(SCALE_NAMESPACES) --scale-shards $(SCALE_SHARDS) --timeout 30m --markdown bin/bench-scale.md $(BENCH_FLAGS)

bench-go: ## Run the Go benchmarks of the hot paths.
	GOWORK=off $(GO) test -run '^$$' -bench . -benchmem ./internal/...

# A release's stamp (docs/releasing.md): the tag, the commit, and the
# commit's time as the build date, so that building a tag again yields the
# same artifacts. make dist and make image stamp alike.
VERSION ?=
REVISION ?= $(shell git rev-parse HEAD)
BUILD_DATE ?= $(shell TZ=UTC0 git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)
MODIFIED ?= $(if $(shell git status --porcelain),true,false)
DIST ?= dist
PLATFORMS ?=
dist: ## Release artifacts of VERSION=v0.x.y in dist/: static stamped binaries for PLATFORMS (default linux/amd64 linux/arm64 darwin/arm64) in archives, SBOMs, checksums, the krew manifest.
	@test -n "$(VERSION)" || { echo 'make dist: set VERSION, e.g. make dist VERSION=v0.1.0' >&2; exit 1; }
	rm -rf -- '$(DIST)'
	GOWORK=off $(GO) run ./hack/dist -go '$(GO)' -version '$(VERSION)' -revision '$(REVISION)' -build-date '$(BUILD_DATE)' -modified=$(MODIFIED) $(if $(PLATFORMS),-platforms '$(PLATFORMS)') -out '$(DIST)'

IMAGE ?= ghcr.io/kgc-dev/kgc
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_FLAGS ?=
image: ## The image IMAGE:VERSION for IMAGE_PLATFORMS with docker buildx, stamped as make dist stamps (IMAGE_FLAGS=--push pushes it).
	@test -n "$(VERSION)" || { echo 'make image: set VERSION, e.g. make image VERSION=v0.1.0' >&2; exit 1; }
	docker buildx build --platform '$(IMAGE_PLATFORMS)' --build-arg VERSION='$(VERSION)' --build-arg REVISION='$(REVISION)' --build-arg BUILD_DATE='$(BUILD_DATE)' --build-arg MODIFIED='$(MODIFIED)' -t '$(IMAGE):$(VERSION)' $(IMAGE_FLAGS) .

lint: ## go vet both modules.
	GOWORK=off $(GO) vet ./...
	$(GO) vet ./sandbox/...

verify: ## gofmt, go vet and go mod tidy must leave the tree unchanged.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	GOWORK=off $(GO) vet ./...
	GOWORK=off $(GO) mod tidy -diff
	cd sandbox && $(GO) mod tidy -diff
