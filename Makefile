# tenure's make targets. The README names the two a newcomer needs:
# `go run ./cmd/tenure demo` (also `make demo`) and `make test`.

GO ?= go
# Fuzz budgets are execution counts in CI: with a duration, go1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure at
# the deadline with no failing input (golang/go#75804, fixed in go1.27).
FUZZTIME ?= 20000x

.PHONY: build demo cluster test check fuzz-short fuzz sim scale nemesis soak bench-compare bench-compare-short

# The release build: a static binary (no cgo, so no C library to match on
# the hosts it is copied to) without urfave/cli's Markdown and man-page
# generators, which tenure does not use. internal/tenurebuild builds the
# same way for the tests that run real agent processes; keep the two in step.
build:
	CGO_ENABLED=0 $(GO) build -tags urfave_cli_no_docs -o bin/tenure ./cmd/tenure

# The fencing story on loopback: three in-process agents and a fenced store.
demo:
	$(GO) run ./cmd/tenure demo

# Three real agent processes on 127.0.0.1, their status, and a failover.
cluster:
	./examples/local-cluster/run.sh

# The whole test suite with the race detector, then the deterministic
# simulation's random schedules at their full counts without it (it runs
# in one goroutine, so under -race they run a short form: the detector
# has nothing to find there and made them about eight times slower), then the
# short form of the fault-injection harness (which skips unless run as root).
SIMTESTS = TestRandomQuorumSchedules|TestRandomBootstrapRaces|TestRandomSchedulesWithLateRosterSteps
test:
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run='^($(SIMTESTS))$$' ./agent
	$(MAKE) nemesis

check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags nemesis ./test/nemesis
	@# Linux-only calls belong in _linux.go files: the agent builds on macOS.
	GOOS=darwin $(GO) build -o /dev/null ./cmd/tenure

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
# bootstrap races, 200 with late roster steps, 200 with leaving views and
# 20 replays of the old release order), with the count of epochs per term
# under churn, and SCHEDULES/5 schedules with late roster steps, with
# views that hold live nodes leaving, and runs of three failovers on a
# loaded network, and SCHEDULES/100 runs of a leader on slow links per
# delay and of one whose grants come one per round; the results of the
# last long runs are in docs/RELIABILITY.md. A schedule's seed comes from
# its index: FROM=20000 starts at index 20000, to run schedules not run
# before.
SCHEDULES ?= 5000
FROM ?= 0
sim:
	$(GO) test -count=1 -timeout=60m -run='^(TestRandomQuorumSchedules|TestRandomBootstrapRaces|TestRandomSchedulesWithLateRosterSteps|TestRandomSchedulesFindEagerRelease|TestEpochsPerTermUnderChurn|TestLoadedNetworkFailsOverInOneTerm|TestSlowLinksKeepTheLease|TestGrantsAcrossRoundsKeepTheLease|TestRandomSchedulesWithLeavingViews)$$' ./agent -args -schedules=$(SCHEDULES) -schedules.from=$(FROM)

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

# The fault-injection harness (test/nemesis; docs/RELIABILITY.md): five real
# agents in network namespaces, a fenced store and writers, partitions made
# with iptables, kills, wipes, pauses and full disks from seeded random
# schedules, and the independent checker (test/nemesis/check). Needs
# root: it skips otherwise. deps.sh installs iproute2 and iptables where
# missing. The
# short form, which make test and CI run: NEMESIS_SCHEDULES random
# schedules (a random seed, printed; NEMESISFLAGS=-nemesis.seed=N replays
# one) and the test that each deliberately broken build fails its check.
# Each scenario and random schedule is a cluster on a network of its own,
# so NEMESIS_PARALLEL of them run at once (their agents mostly wait).
NEMESIS_SCHEDULES ?= 2
NEMESIS_STEPS ?= 4
NEMESIS_PARALLEL ?= 2
NEMESISFLAGS ?=
nemesis:
	./test/nemesis/deps.sh
	$(GO) test -tags nemesis -count=1 -timeout=30m -parallel=$(NEMESIS_PARALLEL) -v ./test/nemesis \
		-args -nemesis.schedules=$(NEMESIS_SCHEDULES) -nemesis.steps=$(NEMESIS_STEPS) $(NEMESISFLAGS)

# The long form: make soak SCHEDULES=200 runs 200 random schedules (of
# NEMESIS_STEPS faults each), NEMESIS_PARALLEL at a time (about 50 s each
# with 4 faults, 70 s with 6: two at a time, half that a schedule), and no
# broken builds.
# SCHEDULES defaults to 200 here, not to sim's 5000.
SOAK_SCHEDULES = $(if $(filter command line environment,$(origin SCHEDULES)),$(SCHEDULES),200)
soak:
	./test/nemesis/deps.sh
	$(GO) test -tags nemesis -count=1 -timeout=0 -parallel=$(NEMESIS_PARALLEL) -v -run='^TestSchedules$$' ./test/nemesis \
		-args -nemesis.schedules=$(SOAK_SCHEDULES) -nemesis.steps=$(NEMESIS_STEPS) $(NEMESISFLAGS)

# tenure against etcd (bench/, a module of its own so that etcd stays out of
# tenure's go.mod; docs/BENCHMARKS.md, "tenure and etcd side by side"):
# crash and graceful failover at TTL 2 s and 10 s (5 real agents against a
# 3-member etcd cluster with concurrency.Election candidates), leader
# queries, and fleets of 3 to 100 agents (idle cost, time to agree, the
# messages of a failover). TRIALS trials per failover setting and system;
# about 12 minutes with the defaults. It writes bench/results.json,
# bench/results.md and docs/failover.png. BENCHFLAGS passes more flags,
# e.g. BENCHFLAGS='-only fleet -fleet 100'.
TRIALS ?= 5
BENCHFLAGS ?=
bench-compare:
	cd bench && $(GO) build -o ../bin/bench-compare .
	cd bench && ../bin/bench-compare -trials $(TRIALS) -out results.json $(BENCHFLAGS)
	cd bench && ../bin/bench-compare report -md results.md -png ../docs/failover.png results.json

# The short form, only to show the suite still runs (about a minute after
# the build): one trial at TTL 2 s, 1-second query runs, a fleet of 3;
# -strict makes it fail if anything measured nothing. It vets and tests
# bench/ first (make check does not reach into its module). Results in
# bin/, docs untouched.
bench-compare-short:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd bench && $(GO) build -o ../bin/bench-compare .
	cd bench && ../bin/bench-compare -trials 1 -ttls 2s -query-time 1s -fleet 3 -idle 3s -strict -out ../bin/bench-short.json
	cd bench && ../bin/bench-compare report -md ../bin/bench-short.md -png ../bin/bench-short.png ../bin/bench-short.json
