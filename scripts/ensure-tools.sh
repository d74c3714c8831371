#!/usr/bin/env bash
# Install the Go-built servers Convoy's tests run, if missing, at pinned
# versions, into $(go env GOPATH)/bin (internal/testsvc looks there and on
# PATH). Idempotent; the module and build caches make a reinstall quick.
#   versitygw   a real S3 gateway (SigV4 checked, posix backend): the cold
#               tier's s3:// tests (internal/testsvc/s3.go)
#   staticcheck make lint (staticcheck.conf)
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
STATICCHECK_VERSION=v0.8.2

bin=$(go env GOPATH)/bin
# The binary does not print its module version; a stamp beside it does.
stamp=$bin/.versitygw-version
if [ ! -x "$bin/versitygw" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$VERSITYGW_VERSION" ]; then
  echo "ensure-tools: installing versitygw $VERSITYGW_VERSION with go install (about a minute the first time)"
  GOFLAGS=-mod=mod go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "$VERSITYGW_VERSION" > "$stamp"
fi

stamp=$bin/.staticcheck-version
if [ ! -x "$bin/staticcheck" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$STATICCHECK_VERSION" ]; then
  echo "ensure-tools: installing staticcheck $STATICCHECK_VERSION with go install"
  GOFLAGS=-mod=mod go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
  echo "$STATICCHECK_VERSION" > "$stamp"
fi
