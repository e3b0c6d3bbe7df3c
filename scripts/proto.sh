#!/usr/bin/env bash
# Regenerates rpc/ringlimitv1 from rpc/proto. Installs protoc and the three
# generators at pinned versions when they are missing. protoc-gen-go-vtproto
# writes ringlimit_vtproto.pb.go: MarshalVT, UnmarshalVT and SizeVT for every
# message, which internal/codec uses in place of reflection (same wire encoding).
# No pool feature: handlers keep decoded messages past the call.
# protoc-gen-ringlimit-utf8 (ours, internal/cmd) writes ringlimit_utf8.pb.go:
# a CheckUTF8 method per message, the proto3 UTF-8 check that vtproto's code
# leaves out and the codec makes.
set -euo pipefail
cd "$(dirname "$0")/.."
GOBIN="$(go env GOPATH)/bin"
export PATH="$GOBIN:$PATH"
if ! command -v protoc >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler
  else
    echo "proto: protoc is missing; install it with: sudo apt-get install -y protobuf-compiler" >&2
    exit 1
  fi
fi
[ -x "$GOBIN/protoc-gen-go" ] || go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ -x "$GOBIN/protoc-gen-go-grpc" ] || go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
[ -x "$GOBIN/protoc-gen-go-vtproto" ] || go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/protoc-gen-ringlimit-utf8" ./internal/cmd/protoc-gen-ringlimit-utf8
mkdir -p rpc/ringlimitv1
protoc -I rpc/proto \
  --go_out=rpc/ringlimitv1 --go_opt=paths=source_relative \
  --go-grpc_out=rpc/ringlimitv1 --go-grpc_opt=paths=source_relative \
  --go-vtproto_out=rpc/ringlimitv1 --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size \
  --plugin=protoc-gen-ringlimit-utf8="$tmp/protoc-gen-ringlimit-utf8" \
  --ringlimit-utf8_out=rpc/ringlimitv1 --ringlimit-utf8_opt=paths=source_relative \
  ringlimit/v1/ringlimit.proto
# source_relative keeps the proto's folders; the Go package is flat.
mv rpc/ringlimitv1/ringlimit/v1/*.go rpc/ringlimitv1/
rm -rf rpc/ringlimitv1/ringlimit
echo "proto: regenerated rpc/ringlimitv1"
