# protctl's everyday tasks. Every target is a thin wrapper: the commands it
# runs work as well on their own.

GO      ?= go
PKG     := github.com/protctl/protctl
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -X $(PKG)/internal/buildinfo.Version=$(VERSION) \
           -X $(PKG)/internal/buildinfo.Commit=$(COMMIT) \
           -X $(PKG)/internal/buildinfo.Date=$(DATE)

.PHONY: build test bench lint docs man crossbuild release-snapshot

## build: the protctl binary in ./protctl, with version, commit and date
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o protctl ./cmd/protctl

## test: every test with the race detector (installs redis-server if needed)
test:
	scripts/test

## bench: the benchmarks, no tests
bench:
	$(GO) test -run '^$$' -bench . ./bench/...

## lint: gofmt and go vet
lint:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## docs: regenerate docs/cli.md from the command tree
docs:
	$(GO) run ./cmd/protctl docs --file docs/cli.md

## man: man pages in ./manpages and completion scripts in ./completions (what the release archives carry)
man:
	scripts/release-assets

## crossbuild: build the six release targets with the release flags (and goreleaser check, if installed)
crossbuild:
	scripts/crossbuild

## release-snapshot: a local release build with goreleaser (dist/), if installed
release-snapshot:
	@if command -v goreleaser >/dev/null 2>&1; then \
		goreleaser release --snapshot --clean; \
	else \
		echo "goreleaser is not installed (go install github.com/goreleaser/goreleaser/v2@v2.15.1); make crossbuild builds the same targets without it" >&2; \
		exit 1; \
	fi
