# For people who build with Docker; `make images` writes the same image
# without it (go-containerregistry, see hack/localcluster.mk).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOFLAGS=-trimpath go build -ldflags "-s -w" -o /manager . && \
    CGO_ENABLED=0 GOFLAGS=-trimpath go build -ldflags "-s -w" -o /etcd-dialer ./apiserver/etcddialer/cmd/etcd-dialer

# The etcd dialer sidecar of the apiserver pods:
# docker build --target etcd-dialer -t <registry>/apiserver-operator/etcd-dialer:v4 .
FROM gcr.io/distroless/static:nonroot AS etcd-dialer
COPY --from=build /etcd-dialer /etcd-dialer
USER 65532:65532
ENTRYPOINT ["/etcd-dialer"]

# The operator (the default target).
FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
# The validator of the bundled kube-apiserver, built by `make bundled`
# (apiserver/bundled/cmd/validator), beside the manager where it looks.
COPY bin/kube-apiserver-validator-* /
USER 65532:65532
ENTRYPOINT ["/manager"]
