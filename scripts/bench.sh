#!/usr/bin/env bash
# Side-by-side benchmark of Convoy in ONE session. Configurations
# alternate A B C D E, A B C D E, ... (ROUNDS rounds) and the median per
# measurement is reported, so slow drift of a shared machine hits all of
# them alike:
#   A direct   MariaDB ds0 127.0.0.1:13306
#   B relay    bin/convoy-bench relay (bytes only) in front of ds0
#   B2 relay2  one relay per datasource (13320 -> ds0, 13321 -> ds1) and
#              client-side sharding (convoy-bench --physical): the same
#              physical tables and servers Convoy uses, one extra hop, no
#              proxy logic; conv_msg reads only (point text / prepared, first
#              text; prepared: one client-side statement per physical table)
#   C convoy   Convoy, no hot tier            (sysbench: passthrough table im.sbtest1;
#                                              convoy-bench: sharded conv_msg etc.)
#   C1 convoy1 Convoy on a one-datasource route table (cluster "one": the same
#              1024 physical tables, all on ds0, databases im1_0..im1_7): the
#              backend work of the plain relay's single server, so Convoy's
#              own cost is not mixed with that of two mysqlds on one box;
#              point and first-screen reads only
#   D hot      Convoy with the Redis hot tier (first-screen pages only)
#   E base     with BASE_REF=<git ref>: Convoy built from that ref, run like
#              convoy (before/after figures of a change in one session)
# Workloads:
#   sb-text / sb-prep      sysbench oltp_point_select, 16 threads, --db-ps-mode=disable / auto,
#                          on im.sbtest1 (unsharded: Convoy passes it through)
#   point-text / -prep     convoy-bench --mix point=100: conv_msg by conv_id + seq
#                          (sharded through Convoy; the same rows in imflat.conv_msg on A/B)
#   first-text / -prep     convoy-bench --mix first=100: newest 20-row history page
#   im-text / im-prep      convoy-bench's default IM mix (first 50, scroll 15, catchup 10,
#                          send 10, jump 5, inbox 5, convlist 5): reads and writes
# A/B run convoy-bench on database imflat (the logical tables, unsharded, on ds0).
#
# Env: ROUNDS (3), DURATION (8 s per measurement), THREADS (16), TABLE_SIZE (100000),
#      CONFIGS ("direct relay relay2 convoy convoy1 hot"), WORKLOADS (all: a subset of
#      sb-text sb-prep point-text point-prep first-text first-prep im-text im-prep),
#      CONVS (2000), CONVOY_REF (build Convoy from this git ref via git archive
#      instead of the working tree), BASE_REF (adds configuration base), KEEP=1 (leave the proxies running), OUT (results dir).
# Data services come from scripts/dev-up.sh (ds0 13306, ds1 13307, Redis 16379,
# etcd 12379); this script starts its own relays (13320 -> ds0, 13321 -> ds1) and two Convoys
# (13310 plain, 13311 hot tier; metrics 19110/19111) and stops them at the end.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
STATE="$ROOT/.state"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
THREADS=${THREADS:-16}
TABLE_SIZE=${TABLE_SIZE:-100000}
CONVS=${CONVS:-2000}
OUT=${OUT:-$STATE/bench/$(date +%Y%m%d-%H%M%S)}
BIN="$STATE/bench/bin"
ETCD=127.0.0.1:12379
DIRECT_PORT=13306 DS1_PORT=13307 RELAY_PORT=13320 RELAY1_PORT=13321 CONVOY_PORT=13310 HOT_PORT=13311 CONVOY1_PORT=13312 BASE_PORT=13313

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
mysql_ds0() { mariadb --no-defaults -h127.0.0.1 -P$DIRECT_PORT -uroot "$@"; }

mkdir -p "$OUT" "$BIN"
PIDS=()
cleanup() {
  [ "${KEEP:-0}" = 1 ] && { log "KEEP=1: leaving pids ${PIDS[*]:-} running"; return; }
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

machine() {
  printf 'nproc %s; %s; load average %s\n' "$(nproc)" \
    "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')" "$(cut -d' ' -f1-3 /proc/loadavg)"
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "machine: $(machine)"

# ---- stack ------------------------------------------------------------------
log "packages (sysbench etc.) and data services (scripts/dev-up.sh)"
scripts/ensure-packages.sh test >&2
scripts/dev-up.sh >&2
# Servers started by an older dev-up.sh keep MariaDB's small table caches:
# the benchmark would measure table-definition reloads, not the proxies.
tdc=$(mysql_ds0 -N -e 'SELECT @@table_definition_cache')
[ "${tdc:-0}" -ge 8000 ] || die "ds0 runs with table_definition_cache=$tdc; restart the dev servers (scripts/dev-down.sh, then scripts/dev-up.sh)"

log "building convoy-bench and convoy"
go build -o "$BIN/convoy-bench" ./cmd/convoy-bench
build_ref() { # REF BINARY: build cmd/convoy as of a git ref (git archive, no work tree)
  local src="$STATE/bench/src-$(basename "$2")"
  rm -rf "$src" && mkdir -p "$src"
  git archive "$1" | tar -x -C "$src"
  (cd "$src" && go build -o "$2" ./cmd/convoy)
}
if [ -n "${CONVOY_REF:-}" ]; then
  build_ref "$CONVOY_REF" "$BIN/convoy"
  CONVOY_DESC="$(git rev-parse --short "$CONVOY_REF") ($CONVOY_REF)"
else
  go build -o "$BIN/convoy" ./cmd/convoy
  CONVOY_DESC="working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!BENCHMARKS.md' ':!scripts/bench.sh' ':!cmd/convoy-bench' || echo ' + uncommitted changes')"
fi
log "convoy: $CONVOY_DESC"
if [ -n "${BASE_REF:-}" ]; then
  build_ref "$BASE_REF" "$BIN/convoy-base"
  BASE_DESC="$(git rev-parse --short "$BASE_REF") ($BASE_REF)"
  log "base: $BASE_DESC"
fi

# Databases and the route table, as scripts/run.sh does.
mysql_ds0 -e 'CREATE DATABASE IF NOT EXISTS im_0; CREATE DATABASE IF NOT EXISTS im_1;
  CREATE DATABASE IF NOT EXISTS im_2; CREATE DATABASE IF NOT EXISTS im_3;
  CREATE DATABASE IF NOT EXISTS im; CREATE DATABASE IF NOT EXISTS imflat;'
mariadb --no-defaults -h127.0.0.1 -P13307 -uroot -e 'CREATE DATABASE IF NOT EXISTS im_4;
  CREATE DATABASE IF NOT EXISTS im_5; CREATE DATABASE IF NOT EXISTS im_6; CREATE DATABASE IF NOT EXISTS im_7;'
if ! "$BIN/convoy" routes --etcd $ETCD --cluster dev show >/dev/null 2>&1; then
  "$BIN/convoy" routes --etcd $ETCD --cluster dev init \
    --datasource ds0=root@127.0.0.1:13306 --datasource ds1=root@127.0.0.1:13307 --dbs 8 >&2
fi
# Cluster "one": every shard on ds0, in databases of its own (im1_N).
for d in 0 1 2 3 4 5 6 7; do mysql_ds0 -e "CREATE DATABASE IF NOT EXISTS im1_$d"; done
if ! "$BIN/convoy" routes --etcd $ETCD --cluster one show >/dev/null 2>&1; then
  python3 - "$OUT/one-routes.json" <<'PY'
import json, sys
doc = {"version": 1, "default_datasource": "ds0",
       "datasources": [{"name": "ds0", "addr": "127.0.0.1:13306", "user": "root"}],
       "shards": [{"from": d * 128, "to": d * 128 + 127, "datasource": "ds0", "database": f"im1_{d}"} for d in range(8)]}
json.dump(doc, open(sys.argv[1], "w"), indent=2)
PY
  "$BIN/convoy" routes --etcd $ETCD --cluster one init --file "$OUT/one-routes.json" >&2
fi

declare -A PID_OF # configuration -> pid(s) of its proxy processes, for CPU accounting
start_convoy() { # NAME PORT METRICS CLUSTER EXTRA_YAML [BINARY]
  local name=$1 port=$2 metrics=$3 cluster=$4 extra=$5 bin=${6:-$BIN/convoy} cfg="$OUT/$1.yaml"
  port_open "$port" && die "port $port is taken (another bench running? ss -ltnp 'sport = :$port')"
  cat >"$cfg" <<EOF
listen: 127.0.0.1:$port
metrics_listen: 127.0.0.1:$metrics
log_level: warn
etcd: {endpoints: ["$ETCD"], cluster: $cluster}
users:
  - {name: convoy, password: convoy, admin: true}
$extra
EOF
  "$bin" serve --config "$cfg" >"$OUT/$name.log" 2>&1 </dev/null &
  PIDS+=($!)
  PID_OF[$name]=$!
  local i
  for ((i = 0; i < 300; i++)); do
    port_open "$port" && { log "$name: Convoy on 127.0.0.1:$port (pid $!)"; return; }
    kill -0 $! 2>/dev/null || { tail -n 20 "$OUT/$name.log" >&2; die "$name exited"; }
    sleep 0.1
  done
  die "$name not listening after 30s"
}
port_open $RELAY_PORT && die "port $RELAY_PORT is taken"
"$BIN/convoy-bench" relay --listen 127.0.0.1:$RELAY_PORT --to 127.0.0.1:$DIRECT_PORT 2>"$OUT/relay.log" &
PIDS+=($!)
PID_OF[relay]=$!
port_open $RELAY1_PORT && die "port $RELAY1_PORT is taken"
"$BIN/convoy-bench" relay --listen 127.0.0.1:$RELAY1_PORT --to 127.0.0.1:$DS1_PORT 2>"$OUT/relay1.log" &
PIDS+=($!)
PID_OF[relay2]="${PID_OF[relay]} $!"
start_convoy convoy $CONVOY_PORT 19110 dev ""
start_convoy hot $HOT_PORT 19111 dev "hot_tier: {enabled: true, addrs: [\"127.0.0.1:16379\"]}"
start_convoy convoy1 $CONVOY1_PORT 19112 one ""
[ -n "${BASE_REF:-}" ] && start_convoy base $BASE_PORT 19113 dev "" "$BIN/convoy-base"
PID_OF[direct]=""
MYSQLD_PIDS="$(cat "$STATE/ds0/mariadbd.pid") $(cat "$STATE/ds1/mariadbd.pid")"

# Logical schema through Convoy (CREATE TABLE IF NOT EXISTS fans out) and in imflat.
log "schema (through both Convoys; imflat directly)"
mariadb --no-defaults -h127.0.0.1 -P$CONVOY_PORT -uconvoy -pconvoy im <schema/im.sql
mariadb --no-defaults -h127.0.0.1 -P$CONVOY1_PORT -uconvoy -pconvoy im <schema/im.sql
mysql_ds0 imflat <schema/im.sql

# ---- data -------------------------------------------------------------------
SB=(sysbench oltp_point_select --tables=1 --table-size="$TABLE_SIZE" --mysql-user=root --mysql-db=im)
log "sysbench prepare im.sbtest1 ($TABLE_SIZE rows) through Convoy"
"${SB[@]}" --mysql-host=127.0.0.1 --mysql-port=$CONVOY_PORT --mysql-user=convoy --mysql-password=convoy cleanup >/dev/null 2>&1 || true
"${SB[@]}" --mysql-host=127.0.0.1 --mysql-port=$CONVOY_PORT --mysql-user=convoy --mysql-password=convoy prepare >"$OUT/sysbench-prepare.log" 2>&1 ||
  { tail -n 20 "$OUT/sysbench-prepare.log" >&2; die "sysbench prepare through Convoy failed"; }
CB_DATA=(--convs "$CONVS")
log "convoy-bench prepare: sharded tables through Convoy, imflat directly"
"$BIN/convoy-bench" --dsn "convoy:convoy@tcp(127.0.0.1:$CONVOY_PORT)/im" "${CB_DATA[@]}" --prepare-only 2>&1 | sed 's/^/  convoy: /' >&2
"$BIN/convoy-bench" --dsn "convoy:convoy@tcp(127.0.0.1:$CONVOY1_PORT)/im" "${CB_DATA[@]}" --prepare-only 2>&1 | sed 's/^/  convoy1: /' >&2
"$BIN/convoy-bench" --dsn "root@tcp(127.0.0.1:$DIRECT_PORT)/imflat" "${CB_DATA[@]}" --prepare-only 2>&1 | sed 's/^/  imflat: /' >&2
# The data went in through the Convoy without the tier: start the tier empty.
redis-cli -h 127.0.0.1 -p 16379 FLUSHALL >/dev/null

# ---- measurements -----------------------------------------------------------
# RESULTS: lines "config workload round qps p99_ms errors proxy_us mysqld_us"
# (CPU per statement of the proxy processes and of both mysqlds, from
# /proc/PID/stat over the whole run: (CPU seconds / wall seconds) / QPS).
RESULTS="$OUT/results.txt"
: >"$RESULTS"

dsn_of() { # CONFIG -> convoy-bench DSN
  case $1 in
    direct) echo "root@tcp(127.0.0.1:$DIRECT_PORT)/imflat" ;;
    relay | relay2) echo "root@tcp(127.0.0.1:$RELAY_PORT)/imflat" ;;
    convoy) echo "convoy:convoy@tcp(127.0.0.1:$CONVOY_PORT)/im" ;;
    convoy1) echo "convoy:convoy@tcp(127.0.0.1:$CONVOY1_PORT)/im" ;;
    base) echo "convoy:convoy@tcp(127.0.0.1:$BASE_PORT)/im" ;;
    hot) echo "convoy:convoy@tcp(127.0.0.1:$HOT_PORT)/im" ;;
  esac
}
sb_target() { # CONFIG -> sysbench connection flags
  case $1 in
    direct) echo "--mysql-host=127.0.0.1 --mysql-port=$DIRECT_PORT --mysql-user=root" ;;
    relay) echo "--mysql-host=127.0.0.1 --mysql-port=$RELAY_PORT --mysql-user=root" ;;
    convoy) echo "--mysql-host=127.0.0.1 --mysql-port=$CONVOY_PORT --mysql-user=convoy --mysql-password=convoy" ;;
    base) echo "--mysql-host=127.0.0.1 --mysql-port=$BASE_PORT --mysql-user=convoy --mysql-password=convoy" ;;
  esac
}

TICK=$(getconf CLK_TCK)
ticks() { # PIDS... -> utime+stime summed, in clock ticks
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo $t
}
cpu_begin() { # CONFIG: start the CPU accounting of one measurement
  # shellcheck disable=SC2086
  CPU0=("$(date +%s.%N)" "$(ticks ${PID_OF[$1]})" "$(ticks $MYSQLD_PIDS)")
}
cpu_end() { # CONFIG QPS -> "proxy_us mysqld_us"
  # shellcheck disable=SC2086
  python3 -c 'import sys
t0, p0, m0, t1, p1, m1, tick, qps = map(float, sys.argv[1:])
w = (t1 - t0) * qps
print(f"{(p1 - p0) / tick / w * 1e6:.1f} {(m1 - m0) / tick / w * 1e6:.1f}" if w > 0 else "0 0")' \
    "${CPU0[@]}" "$(date +%s.%N)" "$(ticks ${PID_OF[$1]})" "$(ticks $MYSQLD_PIDS)" "$TICK" "$2"
}

# wanted WORKLOAD: the workload is in $WORKLOADS (default: all of them).
wanted() { [ -z "${WORKLOADS:-}" ] || [[ " $WORKLOADS " == *" $1 "* ]]; }

run_sysbench() { # CONFIG PSMODE WORKLOAD ROUND
  wanted "$3" || return 0
  local f="$OUT/$1-$3-r$4.txt" qps p99 err
  cpu_begin "$1"
  # shellcheck disable=SC2046
  sysbench oltp_point_select --tables=1 --table-size="$TABLE_SIZE" --mysql-db=im $(sb_target "$1") \
    --threads="$THREADS" --time="$DURATION" --percentile=99 --report-interval=0 \
    --db-ps-mode="$2" --mysql-ignore-errors=all run >"$f" 2>&1 || true
  qps=$(awk '/queries:/ {gsub(/[(]/, "", $3); print $3; exit}' "$f")
  p99=$(awk '/99th percentile:/ {print $3; exit}' "$f")
  err=$(awk '/ignored errors:/ {print $3; exit}' "$f")
  grep -q 'FATAL' "$f" && { err="FATAL"; log "$1 $3: $(grep -m1 FATAL "$f")"; }
  echo "$1 $3 $4 ${qps:-0} ${p99:-0} ${err:-?} $(cpu_end "$1" "${qps:-0}")" >>"$RESULTS"
}

run_cb() { # CONFIG MODE MIX WORKLOAD ROUND
  wanted "$4" || return 0
  local f="$OUT/$1-$4-r$5.json" extra=() qps p99 err
  case $1 in
    direct | relay) extra=(--explicit-seq) ;;
    relay2) extra=(--physical "ds0=root@tcp(127.0.0.1:$RELAY_PORT)/,ds1=root@tcp(127.0.0.1:$RELAY1_PORT)/" --physical-dbs 8) ;;
  esac
  cpu_begin "$1"
  "$BIN/convoy-bench" --dsn "$(dsn_of "$1")" "${CB_DATA[@]}" "${extra[@]}" --conns "$THREADS" \
    --duration "${DURATION}s" --warmup 1s --mode "$2" --mix "$3" --json --quiet --label "$1 $4" >"$f" 2>"$f.err" || true
  local cpu
  read -r qps p99 err < <(python3 -c '
import json,sys
try:
    r=json.load(open(sys.argv[1])); t=r["total"]; print(round(t["qps"]), round(t["p99_us"]/1000,2), sum(o["errors"] for o in r["ops"]))
except Exception: print(0, 0, "FAILED")' "$f")
  cpu=$(cpu_end "$1" "$qps")
  if [ "$err" != 0 ]; then
    log "$1 $4: errors: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print([o.get("first_error") for o in r["ops"] if o["errors"]])' "$f" 2>/dev/null || tail -n 3 "$f.err")"
  fi
  echo "$1 $4 $5 $qps $p99 $err $cpu" >>"$RESULTS"
}

run_config() { # CONFIG ROUND
  local c=$1 r=$2
  case $c in
    relay2)
      run_cb "$c" text point=100 point-text "$r"
      run_cb "$c" prepared point=100 point-prep "$r"
      run_cb "$c" text first=100 first-text "$r"
      return
      ;;
    convoy1)
      run_cb "$c" text point=100 point-text "$r"
      run_cb "$c" prepared point=100 point-prep "$r"
      ;;
    direct | relay | convoy | base)
      run_sysbench "$c" disable sb-text "$r"
      run_sysbench "$c" auto sb-prep "$r"
      run_cb "$c" text point=100 point-text "$r"
      run_cb "$c" prepared point=100 point-prep "$r"
      ;;
  esac
  run_cb "$c" text first=100 first-text "$r"
  run_cb "$c" prepared first=100 first-prep "$r"
  [ "$c" = convoy1 ] && return
  run_cb "$c" text "$IM_MIX" im-text "$r"
  run_cb "$c" prepared "$IM_MIX" im-prep "$r"
}
IM_MIX=first=50,scroll=15,catchup=10,send=10,jump=5,inbox=5,convlist=5

read -r -a CONFIGS <<<"${CONFIGS:-direct relay relay2 convoy convoy1 hot${BASE_REF:+ base}}"
if [[ " ${CONFIGS[*]} " == *" hot "* ]]; then
  # The tier's steady state is warm: fill it (asynchronously, from misses)
  # before anything is recorded, or round 1 measures the fills.
  log "warming the hot tier (${DURATION}s of first-screen reads, not recorded)"
  "$BIN/convoy-bench" --dsn "$(dsn_of hot)" "${CB_DATA[@]}" --conns "$THREADS" --duration "${DURATION}s" \
    --warmup 0s --mode text --mix first=100 --quiet >/dev/null 2>&1 || true
fi
log "measuring: ${#CONFIGS[@]} configurations x $ROUNDS rounds, ${DURATION}s each, $THREADS threads"
T0=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${CONFIGS[@]}"; do
    run_config "$c" "$r"
    log "round $r/$ROUNDS $c done ($(($(date +%s) - T0))s)"
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -----------------------------------------------------------------
python3 - "$RESULTS" "$ROUNDS" "$DURATION" "$THREADS" "$LOAD_BEFORE" "$LOAD_AFTER" "$CONVOY_DESC" "${BASE_DESC:-}" <<'PY' | tee "$OUT/report.md"
import sys, statistics, collections, os
path, rounds, dur, threads, lb, la, desc, base = sys.argv[1:]
res = collections.defaultdict(list)  # (config, workload) -> [(qps, p99, err, proxy_us, mysqld_us)]
for line in open(path):
    c, w, r, q, p, e, pu, mu = line.split()
    res[(c, w)].append((float(q), float(p), e, float(pu), float(mu)))
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"machine: nproc {os.cpu_count()}, {model}; load average before {lb}, after {la}")
print(f"convoy: {desc}; {rounds} rounds x {dur}s per measurement, {threads} client threads, alternating configurations")
if base:
    print(f"base: {base}")
print()
configs = ["direct", "relay", "relay2", "convoy", "convoy1", "hot"] + (["base"] if base else [])
workloads = ["sb-text", "sb-prep", "point-text", "point-prep", "first-text", "first-prep", "im-text", "im-prep"]
med, cpu = {}, {}
print("| workload | " + " | ".join(configs) + " |")
print("|---|" + "---|" * len(configs))
for w in workloads:
    cells = []
    for c in configs:
        v = res.get((c, w))
        if not v:
            cells.append("-"); continue
        qs = [x[0] for x in v]; m = statistics.median(qs); med[(c, w)] = m
        cpu[(c, w)] = (statistics.median([x[3] for x in v]), statistics.median([x[4] for x in v]))
        p99 = statistics.median([x[1] for x in v])
        errs = [x[2] for x in v if x[2] not in ("0", "0.0")]
        spread = (max(qs) - min(qs)) / m * 100 if m else 0
        cell = f"{m:,.0f} (p99 {p99:g} ms, ±{spread/2:.0f}%)"
        if errs: cell += f" ERR {','.join(errs)}"
        cells.append(cell)
    print(f"| {w} | " + " | ".join(cells) + " |")
print("\nQPS = median over rounds; p99 = median of the rounds' p99 (sysbench: --percentile=99; sysbench 1.0 has no warm-up option, convoy-bench runs 1 s unrecorded first); ±x% = half the min-max spread over rounds relative to the median.\n")
print("CPU per statement, microseconds (median over rounds): proxy process(es) / both mysqlds. direct has no proxy.\n")
print("| workload | " + " | ".join(configs) + " |")
print("|---|" + "---|" * len(configs))
for w in workloads:
    cells = [f"{cpu[(c, w)][0]:.1f} / {cpu[(c, w)][1]:.1f}" if (c, w) in cpu else "-" for c in configs]
    print(f"| {w} | " + " | ".join(cells) + " |")
print()
def ratio(a, b):
    if a in med and b in med and med[b]:
        return f"{med[a]/med[b]:.2f}"
    return "-"
print("| ratio | value | target |")
print("|---|---|---|")
rows = [
    ("relay / direct, sysbench text", ("relay", "sb-text"), ("direct", "sb-text"), ""),
    ("Convoy / relay, sysbench text (passthrough)", ("convoy", "sb-text"), ("relay", "sb-text"), ""),
    ("Convoy / relay, sysbench prepared (passthrough)", ("convoy", "sb-prep"), ("relay", "sb-prep"), ""),
    ("Convoy / relay, sharded point select, text (2 servers)", ("convoy", "point-text"), ("relay", "point-text"), ">= 0.90"),
    ("Convoy / relay, sharded point select, prepared (2 servers)", ("convoy", "point-prep"), ("relay", "point-prep"), ">= 0.90"),
    ("Convoy1 / relay, sharded point select, text (1 server, like the relay)", ("convoy1", "point-text"), ("relay", "point-text"), ">= 0.90"),
    ("Convoy1 / relay, sharded point select, prepared (1 server, like the relay)", ("convoy1", "point-prep"), ("relay", "point-prep"), ">= 0.90"),
    ("relay2 / relay, point select, text (what the sharded layout costs one hop)", ("relay2", "point-text"), ("relay", "point-text"), ""),
    ("relay2 / relay, point select, prepared (what the sharded layout costs one hop)", ("relay2", "point-prep"), ("relay", "point-prep"), ""),
    ("Convoy / relay2, sharded point select, text (same tables and servers)", ("convoy", "point-text"), ("relay2", "point-text"), ""),
    ("Convoy / relay2, sharded point select, prepared (same tables and servers)", ("convoy", "point-prep"), ("relay2", "point-prep"), ""),
    ("Convoy / relay2, first-screen page, text (same tables and servers)", ("convoy", "first-text"), ("relay2", "first-text"), ""),
    ("Convoy / relay, first-screen page, text", ("convoy", "first-text"), ("relay", "first-text"), ""),
    ("Convoy1 / relay, first-screen page, text", ("convoy1", "first-text"), ("relay", "first-text"), ""),
    ("prepared / text, direct, sysbench", ("direct", "sb-prep"), ("direct", "sb-text"), ""),
    ("prepared / text, relay, sysbench", ("relay", "sb-prep"), ("relay", "sb-text"), ""),
    ("prepared / text, Convoy, sysbench (passthrough)", ("convoy", "sb-prep"), ("convoy", "sb-text"), ">= 1"),
    ("prepared / text, Convoy, sharded point select", ("convoy", "point-prep"), ("convoy", "point-text"), ">= 1"),
    ("prepared / text, Convoy1, sharded point select", ("convoy1", "point-prep"), ("convoy1", "point-text"), ">= 1"),
    ("prepared / text, Convoy, first-screen page", ("convoy", "first-prep"), ("convoy", "first-text"), ">= 1"),
    ("hot / MySQL-through-Convoy, first-screen, text", ("hot", "first-text"), ("convoy", "first-text"), ">= 1.5"),
    ("hot / MySQL-through-Convoy, first-screen, prepared", ("hot", "first-prep"), ("convoy", "first-prep"), ">= 1.5"),
    ("hot / relay, first-screen, text", ("hot", "first-text"), ("relay", "first-text"), ""),
    ("Convoy / relay, IM mix, text", ("convoy", "im-text"), ("relay", "im-text"), ""),
    ("Convoy / relay, IM mix, prepared", ("convoy", "im-prep"), ("relay", "im-prep"), ""),
    ("prepared / text, Convoy, IM mix", ("convoy", "im-prep"), ("convoy", "im-text"), ">= 1"),
    ("hot / Convoy, IM mix, text", ("hot", "im-text"), ("convoy", "im-text"), ""),
    ("hot / Convoy, IM mix, prepared", ("hot", "im-prep"), ("convoy", "im-prep"), ""),
]
if base:
    rows += [(f"Convoy / base, {w}", ("convoy", w), ("base", w), "") for w in workloads]
for name, a, b, tgt in rows:
    print(f"| {name} | {ratio(a, b)} | {tgt} |")
def cpuratio(a, b):
    if a in cpu and b in cpu and cpu[b][0]:
        return f"{cpu[a][0]/cpu[b][0]:.2f}"
    return "-"
print("\n| proxy CPU per statement | value |")
print("|---|---|")
for name, a, b in [
    ("Convoy1 / relay, point select, text", ("convoy1", "point-text"), ("relay", "point-text")),
    ("Convoy1 / relay, point select, prepared", ("convoy1", "point-prep"), ("relay", "point-prep")),
    ("Convoy1 / relay, first-screen page, text", ("convoy1", "first-text"), ("relay", "first-text")),
    ("Convoy / relay, sysbench text (passthrough)", ("convoy", "sb-text"), ("relay", "sb-text")),
] + ([(f"Convoy / base, {w}", ("convoy", w), ("base", w)) for w in ["sb-text", "point-text", "point-prep", "first-text", "im-text"]] if base else []):
    print(f"| {name} | {cpuratio(a, b)} |")
print("\nnoise (max-min)/median per measurement, %:")
for (c, w), v in sorted(res.items()):
    qs = [x[0] for x in v]; m = statistics.median(qs)
    print(f"  {c:7s} {w:11s} " + " ".join(f"{q:8.0f}" for q in qs) + f"   spread {((max(qs)-min(qs))/m*100 if m else 0):5.1f}%")
PY
log "raw results and logs in $OUT"
