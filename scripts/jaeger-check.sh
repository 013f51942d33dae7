#!/usr/bin/env bash
# jaeger-check: run examples/jaeger against a real Jaeger and fail unless each
# order's trace holds the producer's request span (service shop-api), the
# relay's producer span (outbox-relay), the consumer's span (shipping, with
# outboxkit.dedupe.applied=true) and the handler's span, each the parent of
# the next, as Jaeger's own query API reports them. The replayed order's
# trace must also hold a second publish under the request and, under it, a
# second consumer span with outboxkit.dedupe.applied=false and no handler
# span: the duplicate delivery, traced.
#
# Usage: scripts/jaeger-check.sh        (needs go, curl, jq and PostgreSQL)
#
# The example writes to PostgreSQL: DATABASE_URL, else the local server
# (postgres://postgres@127.0.0.1:5432/test), schema outboxkit_jaeger.
#
# It uses a Jaeger already answering on JAEGER_QUERY if there is one;
# otherwise it starts one (JAEGER_BIN, or `jaeger` on PATH or in GOBIN,
# building it the first time, which takes a few minutes) and stops it at the
# end. Jaeger listens on localhost: OTLP 4317/4318, query API and UI 16686.
#
# Environment: JAEGER_VERSION (v1.76.0), JAEGER_BIN, JAEGER_QUERY
# (http://localhost:16686), OTLP_ENDPOINT (localhost:4318), ORDERS (3),
# JAEGER_CHECK_TIMEOUT (seconds to wait for Jaeger and for traces; 60).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=${JAEGER_VERSION:-v1.76.0}
query=${JAEGER_QUERY:-http://localhost:16686}
otlp=${OTLP_ENDPOINT:-localhost:4318}
orders=${ORDERS:-3}
timeout=${JAEGER_CHECK_TIMEOUT:-60}

log() { printf 'jaeger-check: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

for tool in go curl jq; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

work=$(mktemp -d)
jaeger_pid=
cleanup() {
	if [[ -n $jaeger_pid ]]; then
		kill "$jaeger_pid" 2>/dev/null || true
		wait "$jaeger_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# find_jaeger prints the path of a jaeger binary, building one if needed.
find_jaeger() {
	if [[ -n ${JAEGER_BIN:-} ]]; then
		echo "$JAEGER_BIN"
		return
	fi
	if command -v jaeger >/dev/null; then
		command -v jaeger
		return
	fi
	local gobin
	gobin=$(go env GOBIN)
	[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin
	if [[ -x $gobin/jaeger ]]; then
		echo "$gobin/jaeger"
		return
	fi
	log "installing jaeger $version into $gobin (a few minutes the first time)"
	mkdir -p "$gobin"
	# Outside this module, so nothing here touches its go.mod or go.sum.
	if ! (cd "$work" && go install "github.com/jaegertracing/jaeger/cmd/jaeger@$version") >"$work/install.log" 2>&1; then
		# Jaeger's go.mod has replace directives, which `go install
		# pkg@version` refuses; build it as the main module instead.
		log "go install refused ($(grep -m1 -o 'replace directives' "$work/install.log" || echo 'see below')); building from the module source"
		local dir
		dir=$(cd "$work" && go mod download -json "github.com/jaegertracing/jaeger@$version" | jq -r .Dir)
		[[ -d $dir ]] || die "could not download github.com/jaegertracing/jaeger@$version"
		(cd "$dir" && go build -o "$gobin/jaeger" ./cmd/jaeger) >&2 || die "building jaeger failed"
	fi
	echo "$gobin/jaeger"
}

otlp_ready() {
	# An empty export request is valid OTLP: 200 means the receiver is up.
	[[ $(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
		-d '{}' "http://$otlp/v1/traces" || true) == 200 ]]
}
query_ready() { curl -fsS "$query/api/services" >/dev/null 2>&1; }

if query_ready && otlp_ready; then
	log "using the Jaeger already running at $query"
else
	bin=$(find_jaeger)
	log "starting $bin"
	"$bin" >"$work/jaeger.log" 2>&1 &
	jaeger_pid=$!
	deadline=$((SECONDS + timeout))
	until query_ready && otlp_ready; do
		if ! kill -0 "$jaeger_pid" 2>/dev/null; then
			tail -n 30 "$work/jaeger.log" >&2
			die "jaeger exited before it was ready"
		fi
		((SECONDS < deadline)) || {
			tail -n 30 "$work/jaeger.log" >&2
			die "jaeger not ready after ${timeout}s"
		}
		sleep 0.5 # polling an external process: there is nothing to wait on
	done
	log "jaeger ready: OTLP on $otlp, query API on $query"
fi

log "running examples/jaeger with $orders orders"
out=$(cd "$root" && go run ./examples/jaeger -otlp-endpoint "$otlp" -orders "$orders") || die "examples/jaeger failed"
printf '%s\n' "$out"
mapfile -t traces < <(grep -E '^order [0-9]+: ' <<<"$out" | grep -oE 'trace [0-9a-f]{32}' | awk '{print $2}')
((${#traces[@]} == orders)) || die "examples/jaeger printed ${#traces[@]} trace IDs for $orders orders"
replayed=$(grep -E '^replayed order ' <<<"$out" | grep -oE 'trace [0-9a-f]{32}' | awk '{print $2}')
[[ -n $replayed ]] || die "examples/jaeger printed no replayed order"

# check_trace reads Jaeger's /api/traces answer on stdin and prints the
# trace's span tree, then "ok" when the chain is complete. With $2 = true it
# also wants the duplicate delivery's chain.
check_trace() {
	jq -r --arg t "$1" --argjson dup "$2" '
		def norm: ascii_downcase | sub("^0+"; "");
		[.data[] | select((.traceID | norm) == ($t | norm))][0] // empty
		| . as $tr
		| ($tr.processes | map_values(.serviceName)) as $svc
		| [$tr.spans[] | {
			id: .spanID, op: .operationName, svc: $svc[.processID], start: .startTime,
			kind: ([.tags[]? | select(.key == "span.kind") | .value][0] // "internal"),
			applied: ([.tags[]? | select(.key == "outboxkit.dedupe.applied") | .value][0]),
			parent: ([.references[]? | select(.refType == "CHILD_OF") | .spanID][0] // ""),
			links: [.references[]? | select(.refType == "FOLLOWS_FROM") | .spanID]
		  }] as $spans
		| ($spans | map({key: .id, value: .}) | from_entries) as $byID
		| def one(f): [$spans[] | select(f)][0] // {id: "missing"};
		  def consumer: .svc == "shipping" and .kind == "consumer" and (.op | startswith("process"));
		  one(.svc == "shop-api" and .op == "POST /orders") as $req
		| def publish_under_req: ($byID[.parent] // {}) | .svc == "outbox-relay" and .kind == "producer"
			and (.op | startswith("publish")) and .parent == $req.id;
		  one(consumer and .applied == true and publish_under_req) as $proc
		| one(.svc == "shipping" and .op == "ship order" and .parent == $proc.id) as $ship
		| (if $dup then one(consumer and .applied == false and publish_under_req and .parent != $proc.parent)
		   else {id: "not wanted"} end) as $dupproc
		| ([$spans[] | select(.parent == $dupproc.id)] | length) as $dupkids
		| ($spans | group_by(.parent) | map({key: .[0].parent, value: .}) | from_entries) as $kids
		| def show(s; d): "  " + ("  " * d) + s.op + "  [" + s.svc + ", " + s.kind + "]"
			+ (if s.applied != null then "  dedupe.applied=" + (s.applied | tostring) else "" end)
			+ (if (s.links | length) > 0 then "  links: " + (s.links | join(",")) else "" end),
			(($kids[s.id] // []) | sort_by(.start) | .[] | show(.; d + 1));
		  ($spans | map(select(.parent == "" or $byID[.parent] == null)) | sort_by(.start) | .[] | show(.; 0)),
		  (if [$req, $proc, $ship, $dupproc] | all(.id != "missing") and $dupkids == 0 then "ok" else "incomplete" end)
	'
}

# wait_trace polls Jaeger until check_trace passes for trace $1 ($2: whether
# it is the replayed one), then prints its tree.
wait_trace() {
	local resp result
	while :; do
		resp=$(curl -fsS "$query/api/traces?service=shop-api&lookback=1h&limit=100") || resp='{"data":[]}'
		result=$(check_trace "$1" "$2" <<<"$resp")
		if [[ $(tail -n1 <<<"$result") == ok ]]; then
			sed '$d' <<<"$result" >&2
			return 0
		fi
		if ((SECONDS >= deadline)); then
			[[ -n $result ]] && sed '$d' <<<"$result" >&2
			return 1
		fi
		sleep 1 # Jaeger indexes spans asynchronously; poll until they show
	done
}

deadline=$((SECONDS + timeout))
for t in "${traces[@]}"; do
	if [[ $t == "$replayed" ]]; then
		wait_trace "$t" true || die "trace $t (replayed) lacks the chain, or the duplicate's publish and consumer span (dedupe.applied=false, no handler span under it), after ${timeout}s"
		log "trace $t: request → relay → consumer → handler, and the replay's duplicate delivery beside it ($query/trace/$t)"
	else
		wait_trace "$t" false || die "trace $t lacks the request → relay → consumer → handler chain after ${timeout}s"
		log "trace $t: request → relay → consumer → handler in one trace ($query/trace/$t)"
	fi
done
log "OK: ${#traces[@]} traces, each holding shop-api → outbox-relay → shipping; the duplicate delivery traced in $replayed"
