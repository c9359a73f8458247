# kgc's container image: a static binary on distroless, running as non-root.
#
#   docker build -t kgc .
#
# Multi-platform (buildx / BuildKit): the builder runs on the build machine's
# platform and cross-compiles for the target one.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t registry.example.com/kgc:v0.1.0 --push .
#
# Only the root module is built: the sandbox/ module (embedded etcd and
# kube-apiserver, for tests) is not part of the build context nor needed.
# sandbox/integration/deploy runs this file's build command and checks that
# it yields a static binary; keep the two in step.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Dependencies first, in their own layer, so that source changes do not
# download them again.
COPY go.mod go.sum ./
RUN GOWORK=off go mod download
COPY . .
RUN CGO_ENABLED=0 GOWORK=off GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags=-s -o /out/kgc ./cmd/kgc

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/kgc /usr/local/bin/kgc
# distroless's nonroot user, numerically, so that runAsNonRoot can be checked.
USER 65532:65532
EXPOSE 10258
ENTRYPOINT ["/usr/local/bin/kgc"]
CMD ["run"]
