# syntax=docker/dockerfile:1
# pmu_exporter: a static binary on distroless, running as nonroot (65532).
# Counting the host's PMU needs capabilities that a non-root process only
# gets as ambient capabilities, which container runtimes do not grant: the
# Helm chart therefore runs the container as uid 0 with every capability
# dropped except PERFMON, BPF, SYS_PTRACE and SYS_RESOURCE. This image's
# default user suits --source=replay and `pmu_exporter check`.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t pmu-exporter .
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download && go mod verify
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
ARG BRANCH=unknown
RUN VERSION=${VERSION} REVISION=${REVISION} BRANCH=${BRANCH} BUILD_USER=docker \
    scripts/build /out/pmu_exporter

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="pmu_exporter" \
      org.opencontainers.image.description="CPU performance counters, Top-Down and per-pod attribution for Prometheus" \
      org.opencontainers.image.source="https://github.com/pmu-exporter/pmu_exporter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/pmu_exporter /bin/pmu_exporter
COPY examples/replay /usr/share/pmu_exporter/replay
USER 65532:65532
EXPOSE 9893
ENTRYPOINT ["/bin/pmu_exporter"]
