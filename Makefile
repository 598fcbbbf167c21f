# The README's commands. `make test` is what CI runs (.ci/run).
GO ?= go

.PHONY: test build demo vet

test:
	$(GO) test -race -count=1 ./...
	cd bench && $(GO) test -race -count=1 ./...

build:
	$(GO) build -o bin/fulcrum ./cmd/fulcrum

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
