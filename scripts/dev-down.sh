#!/usr/bin/env bash
# Stop what scripts/dev-up.sh (and scripts/run.sh) started: Convoy, etcd,
# Redis, ds1, ds0. Data stays in .state/ (remove it with `make distclean`).
# Only processes named by pid files under .state/ are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE="$ROOT/.state"
STOP_SECS=${STOP_SECS:-30}

log() { printf 'dev-down: %s\n' "$*"; }

# running PID: exists and is not a zombie (our daemons are reparented to
# pid 1, which may reap them late).
running() {
  kill -0 "$1" 2>/dev/null && [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != [ZX] ]]
}

# stop NAME PIDFILE COMM: SIGTERM, wait up to STOP_SECS, then SIGKILL.
stop() {
  local name=$1 pidfile=$2 comm=$3 pid i
  if [ ! -s "$pidfile" ]; then log "$name: not running"; return; fi
  pid=$(cat "$pidfile")
  if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! running "$pid" || ! grep -q -- "$comm" "/proc/$pid/comm" 2>/dev/null; then
    log "$name: not running (stale pid file)"
    rm -f "$pidfile"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_SECS * 10; i++)); do
    running "$pid" || break
    sleep 0.1
  done
  if running "$pid"; then
    log "$name: still alive after ${STOP_SECS}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  log "$name: stopped (pid $pid)"
}

[ -d "$STATE" ] || { log "nothing to stop ($STATE does not exist)"; exit 0; }
stop convoy "$STATE/convoy.pid" convoy
stop etcd "$STATE/etcd/etcd.pid" etcd
stop redis "$STATE/redis/redis.pid" redis-server
stop ds1 "$STATE/ds1/mariadbd.pid" mariadbd
stop ds0 "$STATE/ds0/mariadbd.pid" mariadbd
