#!/usr/bin/env bash
# Install the Go-built servers Convoy's tests run, if missing, at pinned
# versions, into $(go env GOPATH)/bin (internal/testsvc looks there and on
# PATH). Idempotent; the module and build caches make a reinstall quick.
#   versitygw   a real S3 gateway (SigV4 checked, posix backend): the cold
#               tier's s3:// tests (internal/testsvc/s3.go)
set -euo pipefail

VERSITYGW_VERSION=v1.8.0

bin=$(go env GOPATH)/bin
# The binary does not print its module version; a stamp beside it does.
stamp=$bin/.versitygw-version
if [ ! -x "$bin/versitygw" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$VERSITYGW_VERSION" ]; then
  echo "ensure-tools: installing versitygw $VERSITYGW_VERSION with go install (about a minute the first time)"
  GOFLAGS=-mod=mod go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "$VERSITYGW_VERSION" > "$stamp"
fi
