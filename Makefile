# tenure's make targets. The README names the two a newcomer needs:
# `go run ./cmd/tenure demo` (also `make demo`) and `make test`.

GO ?= go
# Fuzz budgets are execution counts in CI: with a duration, go1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure at
# the deadline with no failing input (golang/go#75804, fixed in go1.27).
FUZZTIME ?= 20000x

.PHONY: build demo cluster test check fuzz-short fuzz sim scale

build:
	$(GO) build -o bin/tenure ./cmd/tenure

# The fencing story on loopback: three in-process agents and a fenced store.
demo:
	$(GO) run ./cmd/tenure demo

# Three real agent processes on 127.0.0.1, their status, and a failover.
cluster:
	./examples/local-cluster/run.sh

# The whole test suite with the race detector.
test:
	$(GO) test -race -count=1 ./...

check:
	gofmt -l $$(git ls-files '*.go')
	$(GO) vet ./...

# Each fuzz target for FUZZTIME executions (CI runs this bounded form).
fuzz-short:
	$(GO) test -run='^$$' -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME) ./internal/wire
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEpoch$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeFence$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeRoster$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeVoter$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEnvelope$$' -fuzztime=$(FUZZTIME) ./agent
	$(GO) test -run='^$$' -fuzz='^FuzzServerFrame$$' -fuzztime=$(FUZZTIME) ./rpc
	$(GO) test -run='^$$' -fuzz='^FuzzScreenGossip$$' -fuzztime=$(FUZZTIME) ./gossip

# Many random schedules of the deterministic core (make test runs 400, 100
# bootstrap races and 20 replays of the old release order); the results of
# the last long run are in docs/RELIABILITY.md.
SCHEDULES ?= 5000
sim:
	$(GO) test -count=1 -timeout=60m -run='^(TestRandomQuorumSchedules|TestRandomBootstrapRaces|TestRandomSchedulesFindEagerRelease)$$' ./agent -args -schedules=$(SCHEDULES)

# A longer fuzz run: make fuzz FUZZTIME=2000000x (or a duration such as 10m,
# keeping in mind the go1.26 deadline race above).
fuzz: fuzz-short

# The scale run (not part of make test): N real agent processes on
# 127.0.0.1 with a cluster key, VOTERS of them voters and the rest
# observers; it reports the time to agree on a leader, the epoch, the idle
# CPU and RSS per agent, and the failover after a kill -9 of the leader
# (docs/BENCHMARKS.md). The CI-sized form: make scale N=10 VOTERS=3.
N ?= 100
VOTERS ?= 5
TIMING ?= lan
SCALEFLAGS ?=
scale:
	$(GO) test -tags scale -count=1 -timeout=30m -run='^TestScale$$' -v ./cmd/tenure \
		-args -scale.n=$(N) -scale.voters=$(VOTERS) -scale.timing=$(TIMING) $(SCALEFLAGS)
