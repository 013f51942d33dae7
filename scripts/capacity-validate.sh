#!/bin/sh
# The capacity model's validation (docs/SCALING.md, "Validation"): measure
# the per-event costs and a saturation run on a scratch PostgreSQL cluster
# pinned to two cores and then to one, and predict each saturation run
# from the other core count's costs.
#
#   scripts/capacity-validate.sh [outdir]
#
# It creates the scratch cluster (pg_createcluster 15 capacity --port
# 5439, trust authentication, the settings of the project's main server:
# autovacuum off, wal_level logical), pins every process of it with
# taskset (the postmaster's children inherit the postmaster's CPU set,
# and the running ones are re-pinned), runs the bench pinned to the same
# CPUs, and drops the cluster at the end unless KEEP=1. The main server
# is not touched. Needs root (pg_createcluster, taskset on postgres's
# processes) and Debian's postgresql-common.
set -eu

out=${1:-/tmp/capacity-validate}
port=${PORT:-5439}
name=${CLUSTER:-capacity}
reps=${REPS:-3}
sat=${SATURATE:-10s}
dsn="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
mkdir -p "$out"
cd "$(dirname "$0")/.."
go build -o "$out/bench" ./contrib/bench

if ! pg_lsclusters -h | awk '{print $2}' | grep -qx "$name"; then
	pg_createcluster 15 "$name" --port "$port" -- -A trust >/dev/null
	cat >>"/etc/postgresql/15/$name/postgresql.conf" <<EOF
# outboxkit capacity validation (scratch): the main server's settings
listen_addresses = '127.0.0.1'
autovacuum = off
wal_level = logical
max_wal_senders = 64
max_replication_slots = 64
EOF
	created=1
fi
pg_ctlcluster 15 "$name" start 2>/dev/null || true
psql -h 127.0.0.1 -p "$port" -U postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
	psql -h 127.0.0.1 -p "$port" -U postgres -c 'CREATE DATABASE test' >/dev/null

pm=$(head -1 "/var/lib/postgresql/15/$name/postmaster.pid")
pin() {
	for p in $pm $(pgrep -P "$pm"); do taskset -a -p -c "$1" "$p" >/dev/null; done
}

run() { # cpus file
	pin "$1"
	echo "== CPUs $1: $(uptime)" | tee -a "$out/loads.txt"
	taskset -c "$1" "$out/bench" -capacity -dsn "$dsn" -capacity-reps "$reps" \
		-capacity-only write,empty,drain,paced,saturate -capacity-transports noop \
		-capacity-wakeups wal,poll -capacity-partitioned=false -capacity-saturate "$sat" \
		-json -v >"$out/$2" 2>"$out/$2.log"
	echo "== done: $(uptime)" | tee -a "$out/loads.txt"
}

run 0,1 two.json
run 0 one.json

# Each core count's saturation predicted from the other's inputs.
"$out/bench" -capacity-inputs "$out/two.json" -capacity-against "$out/one.json" >"$out/one-from-two.txt"
"$out/bench" -capacity-inputs "$out/one.json" -capacity-against "$out/two.json" >"$out/two-from-one.txt"
grep -h -A2 'against the saturation' "$out/one-from-two.txt" "$out/two-from-one.txt"

if [ "${KEEP:-0}" != 1 ] && [ "${created:-0}" = 1 ]; then
	pg_dropcluster --stop 15 "$name"
fi
