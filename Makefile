# The README's commands. `make test` is what CI runs (.ci/run), after `make vet`.
# The gateway's tests run twice: on the event loop (Linux's default) and
# on the goroutine path (FULCRUM_GATEWAY_EVENT_LOOP=off).
GO ?= go

.PHONY: test build demo vet

test:
	$(GO) test -race -count=1 ./...
	FULCRUM_GATEWAY_EVENT_LOOP=off $(GO) test -race -count=1 ./gateway/
	cd bench && $(GO) test -race -count=1 ./...

build:
	$(GO) build -o bin/fulcrum ./cmd/fulcrum

# The README's first command: a gateway on 127.0.0.1:8080 in front of three
# demo upstreams, admin API on 127.0.0.1:9901. Ctrl-C stops it.
demo:
	$(GO) run ./cmd/fulcrum demo

# vet also fails when go.mod/go.sum are not what `go mod tidy` would write
# (a direct dependency marked indirect, one left over): the printed diff is
# the fix, or run `go mod tidy` in the module it names.
vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
