#!/usr/bin/env bash
# Start the local data services for `make run`, all under ./.state/:
#   ds0   MariaDB 127.0.0.1:13306   .state/ds0/
#   ds1   MariaDB 127.0.0.1:13307   .state/ds1/
#   redis Redis   127.0.0.1:16379   .state/redis/
#   etcd  etcd    127.0.0.1:12379 (peer 12380)   .state/etcd/
# Idempotent: a service whose pid file names a live process is reused, an
# existing datadir is reused. Never touches the system MariaDB (3306) or Redis
# (6379). Stop with scripts/dev-down.sh (make down); data stays in .state/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE="$ROOT/.state"
WAIT_SECS=${WAIT_SECS:-30}

"$ROOT/scripts/ensure-packages.sh" dev
mkdir -p "$STATE"

log() { printf 'dev-up: %s\n' "$*"; }
die() { printf 'dev-up: ERROR: %s\n' "$*" >&2; exit 1; }

# alive PIDFILE NAME: the pid file names a live process whose command is NAME.
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -q -- "$2" "/proc/$pid/comm" 2>/dev/null || return 1
  # A killed server may linger as a zombie if nothing reaps it.
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != [ZX] ]]
}

# reusable NAME PIDFILE COMM CHECK...: the pid file names a live COMM that
# answers CHECK. A live process that does not answer yet (starting up, or
# dying after a kill) is given WAIT_SECS to make up its mind.
reusable() {
  local name=$1 pidfile=$2 comm=$3 i; shift 3
  alive "$pidfile" "$comm" || return 1
  for ((i = 0; i < WAIT_SECS * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    alive "$pidfile" "$comm" || { log "$name: pid $(cat "$pidfile") went away; starting a new one"; return 1; }
    sleep 0.1
  done
  die "$name: pid $(cat "$pidfile") is alive but does not answer after ${WAIT_SECS}s; run scripts/dev-down.sh"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_for NAME PIDFILE LOG CHECK...: poll CHECK until it succeeds, the
# process dies, or WAIT_SECS pass.
wait_for() {
  local name=$1 pidfile=$2 logf=$3; shift 3
  local i
  for ((i = 0; i < WAIT_SECS * 10; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ((i > 5)) && ! alive "$pidfile" "$name"; then
      # mariadbd writes its pid file itself, a bit after exec; give it 0.5 s.
      tail -n 30 "$logf" >&2 || true
      die "$name exited during startup (log: $logf)"
    fi
    sleep 0.1
  done
  tail -n 30 "$logf" >&2 || true
  die "$name not ready after ${WAIT_SECS}s (log: $logf)"
}

mariadb_ping() { mariadb --no-defaults -h127.0.0.1 -P"$1" -uroot --connect-timeout=1 -e 'SELECT 1'; }
redis_ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }
etcd_ping() { ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$1" --dial-timeout=1s --command-timeout=2s endpoint health; }

# A datasource holds thousands of physical tables (five logical tables x its
# share of 1024 shards, more while a migration copies): MariaDB's default
# caches (table_definition_cache 400, table_open_cache 2000 split over 4
# instances) re-read table definitions from disk on a good share of
# statements there. Size them above the table count, as a production server
# of a sharded layout must be.
start_mariadb() { # NAME PORT SERVER_ID
  local name=$1 port=$2 id=$3 dir="$STATE/$1"
  local pidfile="$dir/mariadbd.pid" logf="$dir/error.log"
  if reusable "$name" "$pidfile" mariadbd mariadb_ping "$port"; then
    log "$name: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
    return
  fi
  port_open "$port" && die "$name: port $port is taken by a process not started from $STATE (ss -ltnp 'sport = :$port')"
  mkdir -p "$dir"
  if [ ! -d "$dir/data/mysql" ]; then
    log "$name: installing datadir $dir/data"
    rm -rf "$dir/data"
    mariadb-install-db --no-defaults --auth-root-authentication-method=normal --skip-test-db \
      --user="$(id -un)" --datadir="$dir/data" \
      --innodb-log-file-size=48M --innodb-buffer-pool-size=64M \
      >"$dir/install.log" 2>&1 || { tail -n 30 "$dir/install.log" >&2; die "$name: mariadb-install-db failed"; }
  fi
  rm -f "$pidfile"
  log "$name: starting mariadbd on 127.0.0.1:$port"
  setsid nohup /usr/sbin/mariadbd --no-defaults --user="$(id -un)" \
    --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 \
    --socket="$dir/sock" --pid-file="$pidfile" --log-error="$logf" \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
    --skip-name-resolve --log-bin="$dir/binlog" --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL --server-id="$id" \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=48M --max-connections=500 \
    --table-open-cache=8000 --table-definition-cache=8000 \
    --performance-schema=OFF --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 \
    >>"$dir/stdout.log" 2>&1 </dev/null &
  # mariadbd writes its pid file only once storage is up, which after a
  # crash means after recovery (seconds): until then the pid of the process
  # just started (setsid execs it) stands in, so a server still recovering
  # counts as alive and is waited for by asking it (mariadb_ping).
  echo $! >"$pidfile"
  wait_for mariadbd "$pidfile" "$logf" mariadb_ping "$port"
  log "$name: ready (pid $(cat "$pidfile"))"
}

start_redis() {
  local dir="$STATE/redis" port=16379
  local pidfile="$dir/redis.pid" logf="$dir/redis.log"
  if reusable redis "$pidfile" redis-server redis_ping "$port"; then
    log "redis: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
    return
  fi
  port_open "$port" && die "redis: port $port is taken by a process not started from $STATE"
  mkdir -p "$dir"
  rm -f "$pidfile"
  log "redis: starting on 127.0.0.1:$port"
  # Persistence off: Redis is only a cache tier here.
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    --daemonize yes --pidfile "$pidfile" --logfile "$logf"
  wait_for redis-server "$pidfile" "$logf" redis_ping "$port"
  log "redis: ready (pid $(cat "$pidfile"))"
}

start_etcd() {
  local dir="$STATE/etcd" port=12379 peer=12380
  local pidfile="$dir/etcd.pid" logf="$dir/etcd.log"
  if reusable etcd "$pidfile" etcd etcd_ping "$port"; then
    log "etcd: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
    return
  fi
  port_open "$port" && die "etcd: port $port is taken by a process not started from $STATE"
  port_open "$peer" && die "etcd: peer port $peer is taken by a process not started from $STATE"
  mkdir -p "$dir"
  log "etcd: starting on 127.0.0.1:$port (peer $peer)"
  # The --initial-* flags only matter the first time; an existing data dir wins.
  # Compaction and a quota as in production: without them the key history
  # grows until the quota stops every write (routes, migrations, archive).
  setsid nohup etcd --name dev --data-dir "$dir/data" \
    --auto-compaction-mode periodic --auto-compaction-retention 1h --quota-backend-bytes 2147483648 \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "dev=http://127.0.0.1:$peer" --initial-cluster-state new \
    --initial-cluster-token convoy-dev \
    >>"$logf" 2>&1 </dev/null &
  echo $! >"$pidfile"
  wait_for etcd "$pidfile" "$logf" etcd_ping "$port"
  log "etcd: ready (pid $(cat "$pidfile"))"
}

start_mariadb ds0 13306 1
start_mariadb ds1 13307 2
start_redis
start_etcd
log "all services up (state in $STATE; stop with scripts/dev-down.sh)"
