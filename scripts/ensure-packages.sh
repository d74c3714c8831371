#!/usr/bin/env bash
# Install the Debian packages Convoy's dev loop and tests need, if missing.
#   scripts/ensure-packages.sh dev    services for `make run` (dev-up.sh)
#   scripts/ensure-packages.sh test   everything `make test` / CI needs
# Runs `apt-get update` only when something is actually missing. Idempotent.
# apt-get's output goes to PKG_LOG (default .state/packages.log), not the
# console: one line says what is being installed, and a failure prints the
# end of the log.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PKG_LOG=${PKG_LOG:-$ROOT/.state/packages.log}

profile=${1:-test}
case "$profile" in
  dev)  pkgs=(mariadb-server mariadb-client redis-server etcd-server etcd-client) ;;
  test) pkgs=(mariadb-server mariadb-client redis-server etcd-server etcd-client sysbench python3-pymysql python3-mysqldb python3-sqlalchemy ruby-mysql2 default-jdk-headless libmariadb-java nodejs node-mysql make chromium fonts-dejavu-core sphinxsearch) ;;
  *)    echo "usage: $0 dev|test" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "ensure-packages: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
# Ask for a sudo password on the console, before the output goes to the log.
[ ${#sudo[@]} -eq 0 ] || sudo -v
mkdir -p "$(dirname "$PKG_LOG")"
echo "ensure-packages: installing ${missing[*]} with apt-get (a few minutes the first time; log: $PKG_LOG)"
# env after sudo: sudo's env_reset would drop an exported DEBIAN_FRONTEND.
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
if ! { echo "== $(date -Is) ensure-packages $profile: ${missing[*]}" &&
  "${apt[@]}" update -q && "${apt[@]}" install -y -q --no-install-recommends "${missing[@]}"; } >>"$PKG_LOG" 2>&1; then
  echo "ensure-packages: ERROR: apt-get failed; last lines of $PKG_LOG:" >&2
  tail -n 30 "$PKG_LOG" >&2
  exit 1
fi
echo "ensure-packages: installed ${missing[*]}"
