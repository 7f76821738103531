# sluice — see README.md. `make demo` runs the main job, `make test` the tests.
GO      ?= go
BIN     := bin/sluice
TESTFLAGS ?= -timeout 18m

.PHONY: all build deps bench-deps test test-faults demo bench fuzz docs clean

all: build

deps:
	@scripts/install-deps.sh

bench-deps:
	@scripts/install-deps.sh bench

build: deps
	$(GO) build -o $(BIN) ./cmd/sluice

test: deps
	$(GO) vet ./...
	$(GO) test $(TESTFLAGS) ./...

# The whole fault-injection matrix: every component killed in every phase
# (docs/design.md, Faults; about 10 minutes). `make test` runs a subset.
test-faults: deps
	$(GO) test -timeout 60m -count=1 ./agent -run 'TestFaultMatrix|TestTargetDiskFull|TestRollbackWithoutProxyRoute' -faults.all

demo: build
	./$(BIN) demo

# The benchmarks behind docs/results.md, each against its baseline in one run
# (long: about 90 minutes; they start their own clusters and servers).
bench: build bench-deps
	./$(BIN) bench snapshot --json
	./$(BIN) bench handover --json
	./$(BIN) bench handover --wal-segsize 16 --json
	./$(BIN) bench warm --json
	./$(BIN) bench proxy --rounds 3 --json
	./$(BIN) bench router --json
	./$(BIN) bench outside --json
	./$(BIN) bench slack-sweep --json
	./$(BIN) bench slack-sweep --swing 40% --paired --setpoints 3x,3.5x,4x --out out/bench/slack-sweep-swing --json
	./$(BIN) bench step40 --json
	./$(BIN) bench multitenant --json
	./$(BIN) bench downtime --json
	./$(BIN) bench wan --json
	$(GO) test -run XXX -bench . ./throttle/ ./control/ ./lab/sim/ ./transfer/

# Short coverage-guided fuzzing of the parsers that face the network.
fuzz:
	$(GO) test ./proxy -run '^$$' -fuzz FuzzClientMessages -fuzztime 60s
	$(GO) test ./transfer -run '^$$' -fuzz FuzzReceive -fuzztime 60s

clean:
	rm -rf bin out

# Regenerate docs/cli.md from the command tree (a test checks it is current).
docs:
	$(GO) test ./cmd/sluice -run TestCLIReference -update
