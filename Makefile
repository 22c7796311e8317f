# Steward: build, test, benchmark, demo.
GO            ?= go
BIN           := bin/steward
STORE         ?= $(CURDIR)/.cache/store
ETCD_VERSIONS ?= v3.5.35 v3.6.16 v3.7.3
TEST_TIMEOUT  ?= 60m
# E2E_TIMEOUT bounds the end-to-end test binary: it ran 43 to 56 minutes
# on the 2-core CI machines (docs/testing.md), too close to 60.
E2E_TIMEOUT   ?= 75m
# RACE is the unit tests' race detector flag; the end-to-end tests run a
# race-built steward when it is set (STEWARD_TEST_RACE). `make test RACE=`
# turns both off. -race needs cgo and a C compiler (gcc).
RACE          ?= -race
# Unit tests: every package outside test/ (end-to-end tests, benchmarks
# and their harness).
UNIT_PKGS     := ./cmd/... ./internal/... ./pkg/... ./hack/...
DEMO_DIR      ?= $(CURDIR)/steward-data
KUBE_VERSION  ?= v1.36.3
# ARTIFACTS keeps what tests save with t.ArtifactDir() (go test -artifacts):
# the linearizability checker's visualization of a violation
# (docs/testing.md).
ARTIFACTS     ?= $(CURDIR)/test-artifacts
# FUZZTIME is how long `make fuzz` fuzzes each target (hack/fuzz-targets).
FUZZTIME      ?= 10m

.PHONY: all build etcd-binaries s3-server kube-apiserver prometheus test test-unit test-e2e fuzz bench demo demo-down vet clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/steward

## etcd-binaries: build etcd/etcdctl/etcdutl for $(ETCD_VERSIONS) from the Go
## module proxy (cached in .cache/) and import them into $(STORE).
etcd-binaries: build
	STEWARD=$(CURDIR)/$(BIN) STORE=$(STORE) ./hack/build-etcd.sh $(ETCD_VERSIONS)

## s3-server: build the versitygw S3 gateway the S3 tests run (.cache/bin).
s3-server:
	./hack/build-versitygw.sh

## kube-apiserver: build kube-apiserver $(KUBE_VERSION) from the Go module
## proxy into .cache/bin (skipped when that version is there); the tests run
## it above Steward clusters.
kube-apiserver:
	KUBE_VERSION=$(KUBE_VERSION) ./hack/build-kube-apiserver.sh

## prometheus: install prometheus and promtool (Debian's package) when
## missing; the alert rules' tests and the metrics end-to-end test run them.
prometheus:
	./hack/install-prometheus.sh

vet:
	$(GO) vet ./...

## test: the whole suite: unit tests under the race detector, then the
## end-to-end tests (test/...) against real etcd processes of every version
## in $(ETCD_VERSIONS), run by a race-built steward (docs/testing.md).
test: etcd-binaries s3-server kube-apiserver prometheus vet
	STEWARD_TEST_STORE=$(STORE) $(GO) test $(RACE) -count=1 -parallel 1 -timeout $(TEST_TIMEOUT) $(UNIT_PKGS)
	mkdir -p $(ARTIFACTS)
	STEWARD_TEST_STORE=$(STORE) STEWARD_TEST_RACE=$(if $(RACE),1,0) $(GO) test -count=1 -parallel 1 -timeout $(E2E_TIMEOUT) -artifacts -outputdir $(ARTIFACTS) ./test/...

test-unit:
	$(GO) test $(RACE) -count=1 -short $(UNIT_PKGS)

test-e2e: etcd-binaries s3-server kube-apiserver prometheus
	mkdir -p $(ARTIFACTS)
	STEWARD_TEST_STORE=$(STORE) STEWARD_TEST_RACE=$(if $(RACE),1,0) $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -artifacts -outputdir $(ARTIFACTS) -v ./test/e2e/...

## fuzz: fuzz each target listed in hack/fuzz-targets for $(FUZZTIME), one
## worker each (`make fuzz FUZZTIME=90s`). `make test` runs their seed
## corpora (testdata/fuzz/) as ordinary tests.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./hack/fuzz.sh

## bench: the benchmarks recorded in docs/benchmarks.md (steward built
## without the race detector: test/bench's TestMain).
bench: etcd-binaries s3-server kube-apiserver prometheus
	STEWARD_TEST_STORE=$(STORE) $(GO) test -count=1 -v -timeout 150m -run '^$$' -bench . -benchtime 1x ./test/bench/...

## demo: build Steward and start a local three-member cluster on the
## embedded etcd version. `make demo-down` stops it.
demo: build
	./$(BIN) up --dir $(DEMO_DIR)
	./$(BIN) status --dir $(DEMO_DIR)

demo-down:
	./$(BIN) down --dir $(DEMO_DIR)

clean:
	rm -rf bin
