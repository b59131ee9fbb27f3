#!/usr/bin/env bash
# Installs what txmsg needs from Debian and starts the local PostgreSQL when it is
# installed but down. Idempotent; quiet when all is there.
#   ensure-system-deps.sh spark   Java and the JDBC drivers only: what `txmsg ingest` needs
#                                 (`make demo`, whose last step is a Spark run)
#   ensure-system-deps.sh [all]   everything the tests use (`make install`, `make test`):
#                                 also Chromium, promtool, Patroni, etcd, HAProxy
set -euo pipefail

mode="${1:-all}"
case "$mode" in
  spark|all) ;;
  *) echo "usage: $0 [spark|all]" >&2; exit 2 ;;
esac

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# install [--no-install-recommends] PACKAGE...: from Debian, quietly; nothing when none
install() {
  local options=()
  if [ "${1:-}" = --no-install-recommends ]; then options+=("$1"); shift; fi
  [ $# -gt 0 ] || return 0
  echo "installing from Debian: $*"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${options[@]}" "$@" >/dev/null
}

# unwanted SERVICE...: stopped and disabled (the tests start instances of their own)
unwanted() {
  for service in "$@"; do
    if command -v systemctl >/dev/null 2>&1; then
      $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
    if command -v service >/dev/null 2>&1; then
      $sudo service "$service" stop >/dev/null 2>&1 || true
    fi
  done
}

need=()
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
[ -f /usr/share/java/sqlite-jdbc.jar ] || need+=(libxerial-sqlite-jdbc-java)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ "$mode" = spark ]; then
  install "${need[@]}"
  exit 0
fi
# the dashboard's browser tests (tests/browser) drive Debian's headless Chromium
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
install "${need[@]}"

# promtool checks and unit-tests deploy/prometheus; Debian ships it in the prometheus
# package, whose server is not wanted running on a developer's machine
if ! command -v promtool >/dev/null 2>&1; then
  install --no-install-recommends prometheus
  unwanted prometheus
fi

# the high-availability tests (tests/ha) and deploy/patroni, deploy/haproxy run Debian's
# Patroni, etcd and HAProxy
ha_need=()
command -v patroni >/dev/null 2>&1 || ha_need+=(patroni)
command -v etcd >/dev/null 2>&1 || ha_need+=(etcd-server)
command -v haproxy >/dev/null 2>&1 || ha_need+=(haproxy)
if [ ${#ha_need[@]} -gt 0 ]; then
  install --no-install-recommends "${ha_need[@]}"
  unwanted patroni etcd haproxy
fi

# the PgBouncer tests (tests/acceptance/test_pgbouncer.py) start a private pgbouncer in
# transaction pooling mode
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  install --no-install-recommends pgbouncer
  unwanted pgbouncer
fi

# the backup test (tests/acceptance/test_backup_restore.py) runs the runbook's pgBackRest
# procedure on a private cluster and a repository of its own; the package has no service
command -v pgbackrest >/dev/null 2>&1 || install --no-install-recommends pgbackrest

if [ "${TXMSG_SKIP_POSTGRES:-}" != "1" ] && command -v pg_isready >/dev/null 2>&1; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
      echo "starting the local PostgreSQL"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
      for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
    fi
  fi
fi
