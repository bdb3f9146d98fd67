# tenure's make targets. The README names the two a newcomer needs:
# `go run ./cmd/tenure demo` (also `make demo`) and `make test`.

GO ?= go
FUZZTIME ?= 10s

.PHONY: build demo cluster test check fuzz-short fuzz

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

# Each fuzz target for FUZZTIME (CI runs this bounded form).
fuzz-short:
	$(GO) test -run='^$$' -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME) ./internal/wire
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEpoch$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeFence$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeRoster$$' -fuzztime=$(FUZZTIME) ./leasing
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEnvelope$$' -fuzztime=$(FUZZTIME) ./agent
	$(GO) test -run='^$$' -fuzz='^FuzzServerFrame$$' -fuzztime=$(FUZZTIME) ./rpc

# A longer fuzz run: make fuzz FUZZTIME=10m
fuzz: fuzz-short
