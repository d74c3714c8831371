#!/usr/bin/env bash
# `make run`: a complete local Convoy in one command.
#   1. scripts/dev-up.sh            MariaDB ds0/ds1, Redis, etcd under .state/
#                                   (missing Debian packages: apt-get, log .state/packages.log)
#   2. go build -o bin/convoy ./cmd/convoy   (log .state/build.log)
#   3. databases im_0..im_3 + im on ds0, im_4..im_7 on ds1
#   4. bin/convoy routes ... init ...   the route document in etcd (kept if it exists)
#   5. bin/convoy serve --config config/dev.yaml   (background, log .state/convoy.log;
#      hot tier on the dev Redis, console log format)
#   6. schema/im.sql through the proxy, unless .state/schema-applied says this
#      version went through and the datasources still hold the tables it made
#   7. "ready", then Convoy's log on the console; Ctrl-C stops Convoy only.
# The data services keep running afterwards; `make down` stops them.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE="$ROOT/.state"
cd "$ROOT"

CONFIG=${CONFIG:-config/dev.yaml}
CLUSTER=${CLUSTER:-dev}
ETCD=127.0.0.1:12379
LISTEN_PORT=${LISTEN_PORT:-3307}
PIDFILE="$STATE/convoy.pid"
LOG="$STATE/convoy.log"

log() { printf 'run: %s\n' "$*"; }
die() { printf 'run: ERROR: %s\n' "$*" >&2; exit 1; }
step() { printf '\nrun: == %s\n' "$*"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
convoy_alive() { [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && grep -q convoy "/proc/$(cat "$PIDFILE")/comm" 2>/dev/null; }

step "data services"
scripts/dev-up.sh

step "build"
[ -d cmd/convoy ] || die "cmd/convoy does not exist yet: nothing to build"
mkdir -p bin
# The first build downloads modules: their progress goes to the log.
go build -o bin/convoy ./cmd/convoy >"$STATE/build.log" 2>&1 || {
  cat "$STATE/build.log" >&2
  die "go build failed (log: $STATE/build.log)"
}
log "built bin/convoy"

step "databases"
# Layout of `routes init --dbs 8` over two datasources: first half on ds0.
mariadb --no-defaults -h127.0.0.1 -P13306 -uroot -e \
  'CREATE DATABASE IF NOT EXISTS im_0; CREATE DATABASE IF NOT EXISTS im_1;
   CREATE DATABASE IF NOT EXISTS im_2; CREATE DATABASE IF NOT EXISTS im_3;
   CREATE DATABASE IF NOT EXISTS im  /* unsharded tables, default datasource */;'
mariadb --no-defaults -h127.0.0.1 -P13307 -uroot -e \
  'CREATE DATABASE IF NOT EXISTS im_4; CREATE DATABASE IF NOT EXISTS im_5;
   CREATE DATABASE IF NOT EXISTS im_6; CREATE DATABASE IF NOT EXISTS im_7;'
log "ds0: im, im_0..im_3; ds1: im_4..im_7"

step "routes in etcd (cluster $CLUSTER)"
routes=(bin/convoy routes --etcd "$ETCD" --cluster "$CLUSTER")
if "${routes[@]}" show >/dev/null 2>&1; then
  log "route document already in etcd: kept (replace it with: ${routes[*]} init --force ...)"
else
  set +e
  out=$("${routes[@]}" init \
    --datasource ds0=root@127.0.0.1:13306 --datasource ds1=root@127.0.0.1:13307 \
    --dbs 8 2>&1)
  rc=$?
  set -e
  if [ $rc -eq 0 ]; then
    printf '%s\n' "$out"
    log "route document written"
  elif grep -qiE 'already (exists|has)' <<<"$out"; then
    log "route document already in etcd: kept"
  else
    printf '%s\n' "$out" >&2
    die "convoy routes init failed (exit $rc)"
  fi
fi

step "convoy serve"
if convoy_alive; then
  log "stopping previous Convoy (pid $(cat "$PIDFILE")) to run the new build"
  kill -TERM "$(cat "$PIDFILE")" || true
  for _ in $(seq 100); do convoy_alive || break; sleep 0.1; done
  convoy_alive && kill -KILL "$(cat "$PIDFILE")" || true
  rm -f "$PIDFILE"
fi
port_open "$LISTEN_PORT" && die "port $LISTEN_PORT is already taken by another process"
[ -f "$LOG" ] && mv -f "$LOG" "$LOG.1"
bin/convoy serve --config "$CONFIG" >"$LOG" 2>&1 </dev/null &
CONVOY_PID=$!
echo "$CONVOY_PID" >"$PIDFILE"

stop_convoy() {
  trap - INT TERM
  printf '\n'
  log "stopping Convoy (pid $CONVOY_PID); data services keep running (make down stops them)"
  kill -TERM "$CONVOY_PID" 2>/dev/null || true
  wait "$CONVOY_PID" 2>/dev/null || true
  rm -f "$PIDFILE"
  exit 0
}
trap stop_convoy INT TERM

for ((i = 0; i < 300; i++)); do
  port_open "$LISTEN_PORT" && break
  kill -0 "$CONVOY_PID" 2>/dev/null || { tail -n 40 "$LOG" >&2; rm -f "$PIDFILE"; die "convoy exited during startup (log: $LOG)"; }
  sleep 0.1
done
port_open "$LISTEN_PORT" || { tail -n 40 "$LOG" >&2; die "convoy not listening on 127.0.0.1:$LISTEN_PORT after 30s (log: $LOG)"; }
log "Convoy accepts connections on 127.0.0.1:$LISTEN_PORT (pid $CONVOY_PID, log $LOG); not ready before the schema"

step "schema"
# tables: how many tables the im databases hold on both datasources. The
# marker remembers the count after the schema went through, so a datasource
# whose data directory was wiped since gets the schema again.
tables() {
  local n=0 c p
  for p in 13306 13307; do
    c=$(mariadb --no-defaults -h127.0.0.1 -P"$p" -uroot -N -B -e \
      "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im' OR TABLE_SCHEMA LIKE 'im\\_%'") || return 1
    n=$((n + c))
  done
  echo "$n"
}
sum=$(sha256sum schema/im.sql | cut -d' ' -f1)
marker="$STATE/schema-applied"
have=$(tables) || die "counting the tables on the datasources failed"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$sum $have" ]; then
  log "schema/im.sql already in place ($have physical tables; remove $marker to re-send)"
else
  # Every statement is CREATE TABLE IF NOT EXISTS, so re-sending is harmless.
  log "sending schema/im.sql through Convoy (it creates every physical table: about a minute the first time)"
  mariadb --no-defaults -h127.0.0.1 -P"$LISTEN_PORT" -uconvoy -pconvoy im <schema/im.sql ||
    die "sending schema/im.sql through Convoy failed; Convoy is NOT ready (log: $LOG)"
  have=$(tables) || die "counting the tables on the datasources failed"
  [ "$have" -gt 0 ] || die "schema/im.sql went through but the datasources hold no im tables; Convoy is NOT ready (log: $LOG)"
  echo "$sum $have" >"$marker"
  log "schema/im.sql applied through Convoy ($have physical tables)"
fi
kill -0 "$CONVOY_PID" 2>/dev/null || { tail -n 40 "$LOG" >&2; die "convoy exited (log: $LOG)"; }

step "ready"
cat <<EOF
Convoy is ready: the im schema is in place and 127.0.0.1:$LISTEN_PORT serves it.
  connect:  mariadb -c -h127.0.0.1 -P$LISTEN_PORT -uconvoy -pconvoy im
            (-c keeps comments, needed for /*+ convoy ... */ admin directives)
  metrics:  curl -s http://127.0.0.1:9104/metrics
  hot tier: Redis 127.0.0.1:16379 (history reads; convoy_histcache_* metrics)
  backends: mariadb -h127.0.0.1 -P13306 -uroot   (ds0: im, im_0..im_3)
            mariadb -h127.0.0.1 -P13307 -uroot   (ds1: im_4..im_7)
  routes:   etcdctl --endpoints $ETCD get --prefix /convoy
  log:      $LOG (follows below; log_level / log_format in $CONFIG)
Ctrl-C stops Convoy; make down stops MariaDB, Redis and etcd.

EOF
tail -n 0 -F "$LOG" --pid="$CONVOY_PID" 2>/dev/null &
set +e
wait "$CONVOY_PID"
rc=$?
set -e
rm -f "$PIDFILE"
log "convoy exited with status $rc (log: $LOG)"
exit $rc
