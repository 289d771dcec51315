# The two commands a newcomer needs are `make run` and `make test` (see README.md).
GO ?= go

.PHONY: run test build bench fuzz

run:
	$(GO) run ./cmd/pmu_exporter

test:
	scripts/test

build:
	scripts/build pmu_exporter

# Benchmarks behind docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./collectors/... ./counting/

# A short fuzzing pass over every parser and decoder; new crashers land in testdata/fuzz.
fuzz:
	for t in cpuset:FuzzParse eventspec:FuzzResolve config:FuzzParse counting:FuzzScale collectors/perf:FuzzDecodeGroupRead perfstat:FuzzParse replay:FuzzLoad perfrecord:FuzzDecodeSample perfdata:FuzzOpen; do \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime 30s ./$${t%%:*}/ || exit 1; \
	done
