# The two commands a newcomer needs are `make run` and `make test` (see README.md).
# sudo resets PATH to its secure_path, which lacks /usr/local/go/bin where Go's
# installer puts go: look there too.
GO ?= $(shell PATH="$$PATH:/usr/local/go/bin" command -v go || echo go)
# git refuses a repository owned by another user (sudo make run) unless told.
GIT = git -c safe.directory="$(CURDIR)"
VERSION ?= $(shell $(GIT) describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell $(GIT) rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH ?= $(shell $(GIT) rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
VERSION_PKG = github.com/prometheus/common/version
LDFLAGS = -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) -X $(VERSION_PKG).Branch=$(BRANCH)

# AS_ROOT raises privilege only where it is needed: root runs the command
# as it is (a root shell in a Debian container often has no sudo at all),
# anyone else through sudo, which keeps PATH so that go is found.
AS_ROOT := $(if $(filter 0,$(shell id -u)),,sudo --preserve-env=PATH)

.PHONY: run test build image bench fuzz

# ARGS: extra flags for the exporter, e.g. make run ARGS=--collector.counting.per-cpu
# The exporter is built as the caller (their Go caches) and run as root.
run:
	$(GO) build -buildvcs=false -ldflags "$(LDFLAGS)" -o pmu_exporter ./cmd/pmu_exporter
	$(AS_ROOT) ./pmu_exporter $(ARGS)

test:
	$(AS_ROOT) scripts/test

build:
	scripts/build pmu_exporter

# The container image as an OCI layout (pmu-exporter.oci), built with no
# Docker and no base image to pull; docs/deployment.md says how to push it.
image:
	scripts/image pmu-exporter.oci

# Benchmarks behind docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./kernel/... ./formats/readformat/

# A short fuzzing pass over every fuzz target (go test -list '^Fuzz'); new
# crashers land in testdata/fuzz. FUZZTIME=30s per target.
fuzz:
	scripts/fuzz
