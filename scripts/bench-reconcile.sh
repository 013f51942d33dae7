#!/usr/bin/env bash
# bench-reconcile: time `outboxctl reconcile` over N published events (1,000,000
# by default) and their consumer's processed records, and measure the
# process's peak resident memory (GNU time's "Maximum resident set size").
#
# Usage: scripts/bench-reconcile.sh     (needs go, psql, GNU time and PostgreSQL)
#
# It loads schema bench_reconcile (dropped at the end) of DATABASE_URL, else
# the local server (postgres://postgres@127.0.0.1:5432/test), with plain SQL:
# N events written over the last two hours, each published a second after
# it was written, and a processed record of consumer "billing" for every
# one but DROPPED of them, plus PHANTOMS records of events that do not
# exist. reconcile must then report exactly DROPPED missing events and
# PHANTOMS phantoms (exit 1), RUNS times; the script prints each run's wall
# time and peak RSS, and fails when the counts are wrong or a run exceeds
# MAX_RSS_KIB.
#
# Environment: N (1000000), DROPPED (20), PHANTOMS (5), RUNS (3),
# MAX_RSS_KIB (102400, i.e. 100 MiB), OUTBOXCTL (a built outboxctl; default:
# built from contrib/outboxctl into a temporary directory), KEEP=1 keeps the
# schema.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
n=${N:-1000000}
dropped=${DROPPED:-20}
phantoms=${PHANTOMS:-5}
runs=${RUNS:-3}
max_rss=${MAX_RSS_KIB:-102400}
schema=bench_reconcile
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bin=${OUTBOXCTL:-}
if [ -z "$bin" ]; then
  bin=$tmp/outboxctl
  (cd "$root" && go build -o "$bin" ./contrib/outboxctl)
fi
if ! "$bin" reconcile --help >/dev/null 2>&1; then
  echo "bench-reconcile: $bin has no reconcile command (is it in contrib/outboxctl/app.go's command table?)" >&2
  exit 2
fi
[ -x /usr/bin/time ] || { echo "bench-reconcile: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

q() { PGOPTIONS="-c client_min_messages=warning" psql "$url" -X -q -v ON_ERROR_STOP=1 "$@"; }
# A publication belongs to the database, not the schema: drop it too.
drop() { q -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "DROP PUBLICATION IF EXISTS \"outboxkit.$schema.outbox_events\""; }
cleanup() { [ "${KEEP:-}" = 1 ] || drop >/dev/null 2>&1 || true; }
trap 'cleanup; rm -rf "$tmp"' EXIT

drop >/dev/null
DATABASE_URL=$url "$bin" migrate --schema "$schema" >/dev/null
echo "loading $n published events and their records into $schema ..."
start=$(date +%s)
q <<SQL
-- Events every 7.2 ms over the last two hours, published a second later.
INSERT INTO $schema.outbox_events (id, event_type, payload, created_at, available_at, published_at, attempts)
SELECT gen_random_uuid(), 'order.placed', jsonb_build_object('n', g),
       now() - interval '2 hours' + g * interval '7200 ms' / $n,
       now() - interval '2 hours' + g * interval '7200 ms' / $n,
       now() - interval '2 hours' + g * interval '7200 ms' / $n + interval '1 second', 1
FROM generate_series(1, $n) g;
-- A record per event, 50 ms after its publish, but for the first $dropped.
INSERT INTO $schema.outbox_events_processed (consumer, event_id, processed_at)
SELECT 'billing', id, published_at + interval '50 ms'
FROM $schema.outbox_events ORDER BY pos OFFSET $dropped;
INSERT INTO $schema.outbox_events_processed (consumer, event_id, processed_at)
SELECT 'billing', gen_random_uuid(), now() - interval '1 hour' FROM generate_series(1, $phantoms);
VACUUM ANALYZE $schema.outbox_events;
VACUUM ANALYZE $schema.outbox_events_processed;
SQL
echo "loaded in $(( $(date +%s) - start )) s: $(q -Atc "SELECT pg_size_pretty(pg_total_relation_size('$schema.outbox_events')) || ' outbox, ' || pg_size_pretty(pg_total_relation_size('$schema.outbox_events_processed')) || ' processed'")"

# The database's CPU for a run: reconcile's connections carry an
# application_name, and their backends' CPU time is sampled from /proc
# every 100 ms while it runs (the last sample before a backend exits
# counts; PostgreSQL must run on this host).
case $url in *\?*) run_url="$url&application_name=bench_reconcile" ;; *) run_url="$url?application_name=bench_reconcile" ;; esac
hz=$(getconf CLK_TCK)

status=0
for i in $(seq 1 "$runs"); do
  set +e
  DATABASE_URL=$run_url /usr/bin/time -v -o "$tmp/time" "$bin" reconcile --schema "$schema" --consumer billing \
    --since 3h --grace 0s --qstash-token '' --json >"$tmp/out.json" 2>"$tmp/err" &
  rpid=$!
  : >"$tmp/cpu"
  while kill -0 "$rpid" 2>/dev/null; do
    for pid in $(q -Atc "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench_reconcile'" 2>/dev/null); do
      [ -r "/proc/$pid/stat" ] && echo "$pid $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null)" >>"$tmp/cpu"
    done
    sleep 0.1
  done
  wait "$rpid"
  code=$?
  set -e
  dbcpu=$(awk -v hz="$hz" '{ last[$1] = $2 } END { for (p in last) s += last[p]; printf "%.2f", s / hz }' "$tmp/cpu")
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$tmp/time")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time")
  cpu=$(awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$tmp/time")
  counts=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["published"], r["applied"], r["missing"], r["phantoms"], len(r["missing_events"]))' "$tmp/out.json")
  read -r published applied missing phantom listed <<<"$counts"
  echo "run $i: wall $wall, outboxctl CPU ${cpu}s, database CPU ${dbcpu}s, max RSS $rss KiB ($(( rss / 1024 )) MiB), exit $code; published $published applied $applied missing $missing phantoms $phantom; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$code" != 1 ] || [ "$published" != "$n" ] || [ "$missing" != "$dropped" ] || [ "$listed" != "$dropped" ] || [ "$phantom" != "$phantoms" ]; then
    echo "bench-reconcile: wrong report (want exit 1, $n published, $dropped missing, $phantoms phantoms):" >&2
    cat "$tmp/err" >&2
    status=1
  fi
  if [ "$rss" -gt "$max_rss" ]; then
    echo "bench-reconcile: run $i peaked at $rss KiB, over $max_rss KiB" >&2
    status=1
  fi
done
exit $status
