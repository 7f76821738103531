# sluice — see README.md. `make demo` runs the main job, `make test` the tests.
GO      ?= go
BIN     := bin/sluice
TESTFLAGS ?= -timeout 18m

.PHONY: all build deps bench-deps test demo bench fuzz clean

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

demo: build
	./$(BIN) demo

bench: build bench-deps
	./$(BIN) bench --help

clean:
	rm -rf bin out
