#!/usr/bin/env bash
# `make test` and CI: install what tests need, go vet, go test, summary.
# Tests start their own MariaDB/Redis/etcd (internal/testsvc); this script
# starts none. Exit status is non-zero if vet or any test fails.
#   GOTEST_FLAGS   extra flags for go test (e.g. -run Foo, -race)
#   PKGS           packages (default ./...)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PKGS=${PKGS:-./...}

"$ROOT/scripts/ensure-packages.sh" test || exit 1
"$ROOT/scripts/ensure-tools.sh" || exit 1

start=$(date +%s)
out=$(mktemp -t convoy-test.XXXXXX)
trap 'rm -f "$out"' EXIT

echo "== go vet $PKGS"
go vet $PKGS
vet_rc=$?

# -p 2: two cores; each integration package starts several mariadbd/etcd
# processes, so more parallel packages only thrash. -timeout bounds a hung
# test (the stack dump names it); testsvc kills its children when we die.
# The integration package alone runs 11 to 16 minutes here.
echo "== go test -count=1 -p 2 -timeout 25m ${GOTEST_FLAGS:-} $PKGS"
# shellcheck disable=SC2086
go test -count=1 -p 2 -timeout 25m ${GOTEST_FLAGS:-} $PKGS 2>&1 | tee "$out"
test_rc=${PIPESTATUS[0]}

ok=$(grep -cE '^ok ' "$out")
nofiles=$(grep -cE '^\?  ' "$out")
failpkgs=$(grep -E '^FAIL[[:space:]]' "$out" | awk '{print $2}' | sort -u)
failtests=$(grep -E '^\s*--- FAIL: ' "$out" | sed -E 's/^\s*--- FAIL: //' )
buildfail=$(grep -cE '\[build failed\]|\[setup failed\]' "$out")

echo
echo "================ summary ($(( $(date +%s) - start ))s) ================"
echo "go vet:            $([ $vet_rc -eq 0 ] && echo ok || echo "FAILED (exit $vet_rc)")"
echo "packages ok:       $ok"
echo "packages no tests: $nofiles"
if [ -n "$failpkgs" ]; then
  echo "packages FAILED:   $(echo "$failpkgs" | wc -l)  (build/setup failures: $buildfail)"
  echo "$failpkgs" | sed 's/^/  /'
fi
if [ -n "$failtests" ]; then
  echo "tests FAILED:"
  echo "$failtests" | sed 's/^/  /'
fi
if [ $vet_rc -ne 0 ] || [ $test_rc -ne 0 ]; then
  echo "RESULT: FAIL"
  exit 1
fi
echo "RESULT: PASS"
