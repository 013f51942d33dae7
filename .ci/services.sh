#!/usr/bin/env bash
# Makes sure the services the tests need are running on 127.0.0.1: starts what
# is installed but down, installs with apt-get what is missing. Sourced by
# .ci/run; safe to run by hand (`bash .ci/services.sh`).
set -euo pipefail

log() { printf '[services] %s\n' "$*"; }

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port name seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    port_open "$1" && return 0
    sleep 0.1
  done
  log "$2 did not come up on 127.0.0.1:$1 within $3s"
  return 1
}

ensure_postgres() {
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    log "PostgreSQL missing: installing with apt-get"
    apt_install postgresql postgresql-client
  fi
  local ver
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  local hba="/etc/postgresql/$ver/main/pg_hba.conf"
  # The tests connect as postgres over TCP without a password, as on the
  # development machines: trust local connections only.
  if ! grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
    log "configuring trust authentication for 127.0.0.1 in $hba"
    sed -i -E 's/^(host\s+all\s+all\s+127\.0\.0\.1\/32\s+)\S+/\1trust/' "$hba"
    grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32' "$hba" || echo 'host all all 127.0.0.1/32 trust' >>"$hba"
    sed -i -E 's/^(local\s+all\s+all\s+)\S+/\1trust/' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main reload 2>/dev/null || true
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    log "starting PostgreSQL $ver"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  fi
  local i
  for ((i = 0; i < 300; i++)); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 0.1
  done
  pg_isready -h 127.0.0.1 -p 5432
  if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1; then
    log "creating database test"
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test"
  fi
  ensure_logical_replication "$ver"
}

# The relays' default wake-up is a logical replication stream of the outbox
# table's inserts (postgres/wal.go), and the tests cover it: the server must
# run with wal_level = logical. Every relay running at once holds one WAL
# sender and one temporary slot, and the test packages run many relays in
# parallel, so both limits are raised above their default of 10 (each
# costs a few hundred bytes of shared memory). These settings take effect
# only at server start: restart once, and only when something changed.
ensure_logical_replication() {
  local ver=$1 changed=0 q="psql -h 127.0.0.1 -U postgres -d postgres -tAqc"
  if [ "$($q 'SHOW wal_level')" != logical ]; then
    log "setting wal_level = logical"
    $q "ALTER SYSTEM SET wal_level = logical" >/dev/null
    changed=1
  fi
  local name
  for name in max_wal_senders max_replication_slots; do
    if [ "$($q "SHOW $name")" -lt 64 ]; then
      log "setting $name = 64"
      $q "ALTER SYSTEM SET $name = 64" >/dev/null
      changed=1
    fi
  done
  if [ "$changed" = 1 ]; then
    log "restarting PostgreSQL $ver for the replication settings"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main restart
    local i
    for ((i = 0; i < 300; i++)); do
      pg_isready -q -h 127.0.0.1 -p 5432 && break
      sleep 0.1
    done
    pg_isready -h 127.0.0.1 -p 5432
    if [ "$($q 'SHOW wal_level')" != logical ]; then
      log "PostgreSQL still runs with wal_level = $($q 'SHOW wal_level') after the restart"
      return 1
    fi
  fi
}

ensure_nats() {
  port_open 4222 && return 0
  if ! command -v nats-server >/dev/null 2>&1; then
    log "NATS missing: installing with apt-get"
    apt_install nats-server
  fi
  log "starting NATS with JetStream"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222 NATS 30
}

ensure_rabbitmq() {
  port_open 5672 && return 0
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    log "RabbitMQ missing: installing with apt-get"
    apt_install rabbitmq-server
  fi
  log "starting RabbitMQ"
  rabbitmq-server -detached || true
  wait_port 5672 RabbitMQ 90
}

# PgBouncer in transaction mode on 127.0.0.1:6432, in front of the local
# PostgreSQL: the tests of postgres.NewPool, of the pooler detection and
# of the wake-ups behind a pooler, and the store's conformance suite and
# the chaos short run through PgBouncer, connect to it. The configuration
# is ours alone (pgbouncer_conf): Debian's /etc/pgbouncer/pgbouncer.ini and
# PostgreSQL's configuration are left as they are.
pgbouncer_ini=/etc/pgbouncer/outboxkit.ini
pgbouncer_users=/etc/pgbouncer/outboxkit-users.txt
pgbouncer_pid=/var/run/postgresql/pgbouncer-outboxkit.pid

# Trust, as the server behind it: PgBouncer still wants the user in
# auth_file. default_pool_size stays well under the server's
# max_connections (100 by default), which the other test packages' direct
# pools share; max_client_conn is high because every parallel test's pool
# is a client. replication is not in ignore_startup_parameters on purpose:
# PgBouncer must refuse a replication connection, as it does in production.
# server_login_retry is short so that, after PostgreSQL restarts, PgBouncer
# does not refuse clients for its default 15 s.
# test_one_server is the same database through a pool of one server
# connection, where the tests make a prepared statement meet another
# client's on purpose (postgres/pgbouncer_test.go).
pgbouncer_conf() {
  cat <<EOF
;; Written by outboxkit's .ci/services.sh (ensure_pgbouncer): edits are overwritten.
[databases]
test = host=127.0.0.1 port=5432 dbname=test
test_one_server = host=127.0.0.1 port=5432 dbname=test pool_size=1
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $pgbouncer_users
admin_users = postgres
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 30
server_idle_timeout = 30
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = /var/log/postgresql/pgbouncer-outboxkit.log
pidfile = $pgbouncer_pid
EOF
}

# pid_alive pidfile: its process runs and is a PgBouncer (a stale pidfile's
# number may have been reused by another process, which must not be
# signalled).
pid_alive() {
  [ -s "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = pgbouncer ]
}

# stop_pid_file pidfile: stops the PgBouncer of that pidfile and waits for
# it to exit (SIGINT: a safe shutdown, after the running queries).
stop_pid_file() {
  pid_alive "$1" || return 0
  local pid i
  pid=$(cat "$1")
  kill -INT "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -TERM "$pid" 2>/dev/null || true
}

ensure_pgbouncer() {
  if ! [ -x /usr/sbin/pgbouncer ]; then
    log "PgBouncer missing: installing with apt-get"
    apt_install pgbouncer
  fi
  local want
  want=$(pgbouncer_conf)
  if pid_alive "$pgbouncer_pid" && [ "$(cat "$pgbouncer_ini" 2>/dev/null)" = "$want" ] && port_open 6432; then
    return 0
  fi
  printf '%s\n' "$want" >"$pgbouncer_ini"
  printf '"postgres" ""\n' >"$pgbouncer_users"
  chown postgres:postgres "$pgbouncer_ini" "$pgbouncer_users"
  chmod 640 "$pgbouncer_ini" "$pgbouncer_users"
  stop_pid_file "$pgbouncer_pid"
  # Debian's own instance (its service may have started at install) listens
  # on 6432 too.
  stop_pid_file /var/run/postgresql/pgbouncer.pid
  if port_open 6432; then
    log "something other than PgBouncer holds 127.0.0.1:6432: stop it, the tests need PgBouncer there"
    return 1
  fi
  log "starting PgBouncer (transaction mode) on 127.0.0.1:6432"
  # PgBouncer refuses to run as root.
  runuser -u postgres -- /usr/sbin/pgbouncer -d -q "$pgbouncer_ini"
  wait_port 6432 PgBouncer 30
  if ! psql -h 127.0.0.1 -p 6432 -U postgres -d test -tAqc 'SELECT 1' >/dev/null; then
    log "PgBouncer is up but cannot reach PostgreSQL: see /var/log/postgresql/pgbouncer-outboxkit.log"
    return 1
  fi
}

# Prometheus's promtool runs the alert rules' unit tests, and the monitoring
# end-to-end test (contrib/monitoring) starts a prometheus of its own on a
# free loopback port with a temporary configuration: nothing here runs one.
# Debian's package starts and enables a service on :9090 where its init
# policy allows it (and recommends node-exporter, on :9100, which the tests
# do not need): the install stops and disables that service, so it takes no
# port and scrapes nothing. A Prometheus someone runs on purpose on a
# machine where the package was already installed is left alone.
ensure_prometheus() {
  if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    return 0
  fi
  log "Prometheus missing: installing with apt-get (its service is stopped and disabled)"
  apt_install --no-install-recommends prometheus
  if [ -x /etc/init.d/prometheus ]; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  promtool --version >/dev/null
}

# Node.js and npm run the official TypeScript SDK (@upstash/qstash) against
# qstashdev (internal/interop/qstashts): its Go test runs `npm ci` from the
# committed lock file and fails, never skips, when node or npm is missing.
ensure_node() {
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    return 0
  fi
  log "Node.js or npm missing: installing with apt-get"
  apt_install nodejs npm
  node --version >/dev/null
}

# Debian's Chromium runs the dashboard's browser tests (contrib/dashboard,
# driven by chromedp): they fail, never skip, when /usr/bin/chromium is
# missing. Nothing downloads a browser of its own.
ensure_chromium() {
  [ -x /usr/bin/chromium ] && return 0
  log "Chromium missing: installing Debian's chromium with apt-get"
  apt_install chromium
  [ -x /usr/bin/chromium ]
}

ensure_postgres
ensure_pgbouncer
ensure_nats
ensure_rabbitmq
ensure_prometheus
ensure_node
ensure_chromium
log "PostgreSQL, PgBouncer, NATS and RabbitMQ are up; promtool, prometheus, node, npm and chromium are installed"
