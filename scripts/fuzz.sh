#!/usr/bin/env bash
# Runs every Fuzz* target (found with go test -list in the packages that
# declare one) for FUZZTIME each (make fuzz).
#
# A target fails when it wrote a new failing input under testdata/fuzz/.
# A run that exits non-zero with "context deadline exceeded" and wrote no
# input is Go's fuzz coordinator racing its own -fuzztime deadline
# (go.dev/issue/75804, fixed in Go 1.27; this module is on 1.26), not a
# finding: it is reported and retried once, and fails the run only if it
# happens again.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-3s}
n=0
for dir in $($GO list -f '{{.Dir}}' ./...); do
  grep -qs '^func Fuzz' "$dir"/*_test.go || continue
  for f in $($GO test -list '^Fuzz' "$dir" | grep -E '^Fuzz' || true); do
    corpus="$dir/testdata/fuzz/$f"
    for attempt in 1 2; do
      echo "== fuzz $dir $f ($FUZZTIME)"
      before=$(ls "$corpus" 2>/dev/null | sort || true)
      log=$(mktemp)
      if $GO test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "$dir" 2>&1 | tee "$log"; then
        rm -f "$log"
        break
      fi
      after=$(ls "$corpus" 2>/dev/null | sort || true)
      if [ "$before" != "$after" ] || ! grep -q 'context deadline exceeded' "$log" || [ "$attempt" = 2 ]; then
        echo "fuzz: $f failed (new inputs: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' '))"
        rm -f "$log"
        exit 1
      fi
      echo "fuzz: $f hit the fuzz coordinator's deadline race (go.dev/issue/75804) and wrote no input: running it again"
      rm -f "$log"
    done
    n=$((n + 1))
  done
done
echo "fuzz: $n target(s) ran clean"
