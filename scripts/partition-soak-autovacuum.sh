#!/bin/sh
# The partition soak (contrib/bench partition_soak.go) with autovacuum on,
# as a production server runs: the project's main server has it off, so
# the soak runs on a scratch cluster left at PostgreSQL's defaults
# (autovacuum on, autovacuum_naptime 1 min, three workers), the plain
# table and then the partitioned one (about an hour; -soak-together runs
# both at once on a machine with the cores for it).
#
#   scripts/partition-soak-autovacuum.sh [outdir] [bench flags...]
#
# It creates the scratch cluster (pg_createcluster 15 soak --port 5441,
# trust authentication, listening on 127.0.0.1 only), runs the soak
# against it and drops the cluster at the end unless KEEP=1. The main
# server is not touched. Needs root and Debian's postgresql-common.
set -eu

out=${1:-/tmp/partition-soak-autovacuum}
[ $# -gt 0 ] && shift
port=${PORT:-5441}
name=${CLUSTER:-soak}
dsn="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
mkdir -p "$out"
cd "$(dirname "$0")/.."
go build -o "$out/bench" ./contrib/bench

if ! pg_lsclusters -h | awk '{print $2}' | grep -qx "$name"; then
	pg_createcluster 15 "$name" --port "$port" -- -A trust >/dev/null
	cat >>"/etc/postgresql/15/$name/postgresql.conf" <<CONF
# outboxkit partition soak (scratch): PostgreSQL's defaults but for these
listen_addresses = '127.0.0.1'
max_connections = 200
CONF
	created=1
fi
pg_ctlcluster 15 "$name" start 2>/dev/null || true
psql -h 127.0.0.1 -p "$port" -U postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
	psql -h 127.0.0.1 -p "$port" -U postgres -c 'CREATE DATABASE test' >/dev/null
echo "autovacuum = $(psql -h 127.0.0.1 -p "$port" -U postgres -Atc 'SHOW autovacuum')"

status=0
"$out/bench" -workloads partition-soak -reps 1 -dsn "$dsn" -json -v "$@" >"$out/soak.json" 2>"$out/soak.log" || status=$?
tail -n 40 "$out/soak.log"

if [ "${KEEP:-0}" != 1 ] && [ "${created:-0}" = 1 ]; then
	pg_dropcluster --stop 15 "$name"
fi
exit "$status"
