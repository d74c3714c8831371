#!/usr/bin/env bash
# The engine's own cost per statement, this tree against BASE_REF, side by
# side in one run: the engine benchmarks (a sharded point select as text
# and prepared, a write by key, a keyless read over every physical table;
# the backend is a no-op fake, so the figures are Convoy's CPU and
# allocations only) alternate between the two trees ROUNDS times and the
# median of each is printed with the ratio.
#
# Env: BASE_REF (HEAD~1), ROUNDS (5), BENCHTIME (1s), BENCH (the regexp of
# benchmarks: QueryText|ExecutePrepared|WriteText|ScatterText).
set -euo pipefail
cd "$(dirname "$0")/.."
base_ref=${BASE_REF:-HEAD~1}
rounds=${ROUNDS:-5}
benchtime=${BENCHTIME:-1s}
bench=${BENCH:-'QueryText|ExecutePrepared|WriteText|ScatterText'}

base=$(mktemp -d /tmp/convoy-base-XXXXXX)
out=$(mktemp -d /tmp/convoy-bench-engine-XXXXXX)
cleanup() { git worktree remove --force "$base" >/dev/null 2>&1 || rm -rf "$base"; }
trap cleanup EXIT
git worktree add -q --detach "$base" "$base_ref"
# The benchmarks a newer tree added run on the base too.
for f in proxy/engine/bench_engine_test.go; do
  [ -e "$base/$f" ] || cp "$f" "$base/$f"
done

run() { # TREE LABEL
  (cd "$1" && go test -run '^$' -bench "$bench" -benchmem -benchtime "$benchtime" -count 1 ./proxy/engine/) |
    awk -v l="$2" '/^Benchmark/ {print l, $0}' >>"$out/raw"
}
echo "== $rounds rounds, base $(git -C "$base" rev-parse --short HEAD) ($base_ref) vs this tree $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
for ((i = 1; i <= rounds; i++)); do
  run "$base" base
  run . head
done
# raw: LABEL NAME-P N NS ns/op B B/op ALLOCS allocs/op
printf "%-28s %14s %14s %7s %12s %12s %12s %12s\n" benchmark "base ns/op" "head ns/op" ratio "base B/op" "head B/op" "base allocs" "head allocs"
awk '
  { name = $2; sub(/-[0-9]+$/, "", name); k = $1 SUBSEP name
    ns[k] = ns[k] " " $4; by[k] = by[k] " " $6; al[k] = al[k] " " $8; names[name] = 1 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (n in names) {
      b = "base" SUBSEP n; h = "head" SUBSEP n
      if (!(b in ns) || !(h in ns)) continue
      printf "%-28s %14.0f %14.0f %7.3f %12.0f %12.0f %12.0f %12.0f\n", n, median(ns[b]), median(ns[h]), median(ns[h]) / median(ns[b]), median(by[b]), median(by[h]), median(al[b]), median(al[h])
    }
  }' "$out/raw" | sort
echo "(raw figures: $out/raw)"
