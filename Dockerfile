# kgc's container image: a static binary on distroless, running as non-root.
#
#   docker build -t kgc .
#   make image VERSION=v0.1.0 IMAGE=registry.example.com/kgc IMAGE_FLAGS=--push
#
# Multi-platform (buildx / BuildKit): the builder runs on the build machine's
# platform and cross-compiles for the target one.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t registry.example.com/kgc:v0.1.0 --push .
#
# A release image is stamped as `make dist` stamps the binaries — the tag,
# the commit, the commit's time and whether the tree was modified — which
# `make image VERSION=v0.x.y` passes as build arguments (docs/releasing.md).
# Without them `kgc version` says (devel): the build context has no .git.
#
# Only the root module is built: the sandbox/ module (embedded etcd and
# kube-apiserver, for tests) is not part of the build context nor needed.
# sandbox/integration/deploy runs this file's build command and checks that
# it yields a static binary, the same bytes as make dist's for the same
# stamp; keep the two in step.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Dependencies first, in their own layer, so that source changes do not
# download them again.
COPY go.mod go.sum ./
RUN GOWORK=off go mod download
COPY . .
# Declared after the download, so that a new stamp does not download the
# modules again.
ARG VERSION
ARG REVISION
ARG BUILD_DATE
ARG MODIFIED=false
RUN CGO_ENABLED=0 GOWORK=off GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false -ldflags="-s -w -X github.com/kgc-dev/kgc/internal/buildinfo.version=${VERSION} -X github.com/kgc-dev/kgc/internal/buildinfo.revision=${REVISION} -X github.com/kgc-dev/kgc/internal/buildinfo.buildDate=${BUILD_DATE} -X github.com/kgc-dev/kgc/internal/buildinfo.modified=${MODIFIED}" -o /out/kgc ./cmd/kgc

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/kgc /usr/local/bin/kgc
# distroless's nonroot user, numerically, so that runAsNonRoot can be checked.
USER 65532:65532
EXPOSE 10355
ENTRYPOINT ["/usr/local/bin/kgc"]
CMD ["run"]
