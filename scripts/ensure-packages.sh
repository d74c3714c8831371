#!/usr/bin/env bash
# Install the Debian packages Convoy's dev loop and tests need, if missing.
#   scripts/ensure-packages.sh dev    services for `make run` (dev-up.sh)
#   scripts/ensure-packages.sh test   everything `make test` / CI needs
# Runs `apt-get update` only when something is actually missing. Idempotent.
set -euo pipefail

profile=${1:-test}
case "$profile" in
  dev)  pkgs=(mariadb-server mariadb-client redis-server etcd-server etcd-client) ;;
  test) pkgs=(mariadb-server mariadb-client redis-server etcd-server etcd-client sysbench python3-pymysql python3-sqlalchemy ruby-mysql2 default-jdk-headless libmariadb-java nodejs node-mysql make) ;;
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
echo "ensure-packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
