# outboxkit's developer commands. `make test` is what CI runs (.ci/run).
GO ?= go
# Every package of every module in go.work: in workspace mode an import-path
# pattern reaches all of them, where ./... would stop at the root module.
PKGS := github.com/outboxkit/outboxkit/...

.PHONY: test fmt-check vet unit repo-check examples-smoke fmt jaeger-check chaos fuzz bench relay-soak failover soak partitions-bench partition-soak partition-soak-autovacuum

test: fmt-check vet repo-check unit examples-smoke

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet $(PKGS)

# -race always; -count=1 so CI never serves cached results.
unit:
	$(GO) test -race -count=1 -timeout 10m $(PKGS)

# The rules the repository keeps (internal/repocheck): core imports only the
# standard library, library packages import the OpenTelemetry API only, the
# root module requires only pgx, golang-jwt and the OTel API, a service
# importing the library inherits nothing else, every module is in go.work,
# and no executable or file over 1 MiB is tracked. `unit` runs them again;
# this target runs them first, so a broken rule fails fast.
repo-check:
	$(GO) test -count=1 ./internal/repocheck

# Starts a real Jaeger (building it on first use), runs examples/jaeger and
# fails unless one trace holds the producer, relay and consumer spans.
jaeger-check:
	scripts/jaeger-check.sh

examples-smoke:
	$(GO) run ./examples/inmemory
	$(GO) run ./examples/serverless-relay
	$(GO) run ./examples/quickstart
	DATABASE_URL='postgres://postgres@127.0.0.1:6432/test?sslmode=disable' WAKEUP_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' $(GO) run ./examples/quickstart
	$(GO) run ./examples/database-sql
	$(GO) run ./examples/sqlc
	$(GO) run ./examples/ordered-consumer
	$(GO) run ./examples/jaeger -otlp-endpoint=
	$(GO) run ./examples/custom-adapter

# The long fault-injection suites (about 8 minutes): TestChaosLong, and
# TestChaosLongOrdered (consumer-side order, 200 aggregates × 50 events, with
# the relays' ordering off, then on). TestChaosLong restarts the local
# PostgreSQL (immediate mode), so run it alone. `make test` runs the short
# versions as part of `unit`.
chaos:
	$(GO) test -race -count=1 -v -timeout 20m -run 'TestChaosLong' ./internal/chaos/ -args -long

# The relay service's memory over time (contrib/outboxctl TestRelaySoak):
# ten schemas in one `outboxctl relay` process for 10 minutes under a steady
# load, failing if its resident memory (VmRSS) grows more than 10 % after
# the 2-minute warm-up. Built without -race, whose shadow memory is not the
# relay's. Not part of `make test`.
relay-soak:
	$(GO) test -count=1 -v -timeout 20m -run 'TestRelaySoak' ./contrib/outboxctl/ -args -soak 10m

# PostgreSQL failover (internal/chaos TestFailover, longer and busier than
# the version `make test` runs): a scratch primary and its synchronous
# streaming replica (pg_createcluster, pg_basebackup, spare ports; needs
# root), writers and three relays on a multi-host URL, the replica
# promoted and the old primary stopped mid-run.
failover:
	$(GO) test -race -count=1 -v -timeout 10m -run 'TestFailover' ./internal/chaos/ -args -failover.long

# The soak (internal/chaos TestSoak, not in CI): 30 minutes at 2,000
# events/s through three relay processes, qstashdev and the consumer, a
# fault every 30 s; relay memory and goroutines flat, p99 stable, nothing
# lost. Samples (CSV) and plots (PNG, by gnuplot) land in docs/soak.
SOAK ?= 30m
soak:
	@command -v gnuplot >/dev/null || apt-get install -y gnuplot-nox
	$(GO) test -count=1 -v -timeout 60m -run 'TestSoak' ./internal/chaos/ -args -soak $(SOAK) -soak.out $(CURDIR)/docs/soak

# Fuzz targets. An execution count rather than a duration sidesteps a Go 1.26
# fuzzing bug that reports "context deadline exceeded" at the time limit.
FUZZTIME ?= 400000x
fuzz:
	$(GO) test ./qstash/ -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) -parallel 1
	$(GO) test ./qstash/ -run '^$$' -fuzz '^FuzzDecodeHeaders$$' -fuzztime $(FUZZTIME) -parallel 1
	$(GO) test ./internal/chaos/ -run '^$$' -fuzz '^FuzzEventFromCloudEventHeaders$$' -fuzztime $(FUZZTIME) -parallel 1
	$(GO) test ./internal/chaos/ -run '^$$' -fuzz '^FuzzCloudEventRoundTrip$$' -fuzztime $(FUZZTIME) -parallel 1

# The comparative benchmark (docs/BENCHMARKS.md): about 13 minutes on 2 cores,
# needs PostgreSQL and pgbench. Not part of `make test`, which runs the
# harness's smoke test instead.
bench:
	$(GO) run ./contrib/bench -reps 3 $(BENCHFLAGS)

# The partitioned layout (contrib/bench partitions.go): 10,000,000 published
# rows kept beside drains of 300,000 events and 20-second latency runs, on
# the plain layout and on daily partitions, and one day of 1,000,000
# retired both ways; about 16 minutes (docs/BENCHMARKS.md, runs 4-7). partition-soak: 2,000 events/s for 30 minutes on each layout,
# one after the other (plain and 5-minute partitions; BENCHFLAGS=-soak-partitions=hourly
# for others, -soak-together for both at once on a larger machine) with a 10-minute
# retention, the table's size and dead rows sampled, on the main server
# (autovacuum off here). partition-soak-autovacuum: the same on a scratch
# cluster with PostgreSQL's defaults, autovacuum on (scripts/; needs root).
partitions-bench:
	$(GO) run ./contrib/bench -workloads partitions -reps 3 -batches 100,500 -events 300000 -latency-duration 20s -v $(BENCHFLAGS)

partition-soak:
	$(GO) run ./contrib/bench -workloads partition-soak -reps 1 -v $(BENCHFLAGS)

partition-soak-autovacuum:
	scripts/partition-soak-autovacuum.sh /tmp/partition-soak-autovacuum $(BENCHFLAGS)
