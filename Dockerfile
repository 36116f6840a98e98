# syntax=docker/dockerfile:1
# loadaware-epp container image (see docs/deploy/image.md).
#
#   docker build -t loadaware-epp:dev --build-arg VERSION=$(git describe --always) .
#
# Two stages: the build image compiles the picker with cgo against Debian 12's
# libzmq; the runtime image is Debian 12 slim with only the libzmq shared
# library added. Both base images are pinned; bump them together so the
# libzmq the binary was linked against is the one it runs with.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=debian:12.11-slim

FROM ${GO_IMAGE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libzmq3-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/loadaware-epp ./cmd/loadaware-epp \
 && /out/loadaware-epp version

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libzmq5 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/loadaware-epp /usr/local/bin/loadaware-epp
LABEL org.opencontainers.image.title="loadaware-epp" \
      org.opencontainers.image.description="Load-aware endpoint picker for vLLM fleets (Envoy ext_proc, GIE InferencePool)"
# A numeric non-root user, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# ext_proc gRPC, gRPC health, Prometheus metrics + admin HTTP,
# LMCache controller PULL and reply (ROUTER).
EXPOSE 9002 9003 9090 9000 9001
ENTRYPOINT ["/usr/local/bin/loadaware-epp"]
CMD ["serve"]
