# deskd: see README.md. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
IMAGE ?= localhost/cubepod/desktop:dev
VENDOR := web/static/vendor
NM := node_modules
LISTEN ?= 127.0.0.1:8080
RUN_DIR ?= /tmp/deskd-run
TESTFLAGS ?= -race -count=1 -timeout 20m
FUZZTIME ?= 10s
XTERM_ADDONS := fit webgl web-links unicode11 search image

.PHONY: help deps assets build run test check fmt vet fuzz bench image image-test clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 12

$(NM)/.package-lock.json: package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund $(NPM_FLAGS)
	@touch $@

$(VENDOR)/novnc/core/rfb.js: $(NM)/.package-lock.json
	rm -rf $(VENDOR)
	mkdir -p $(VENDOR)/novnc $(VENDOR)/xterm/lib $(VENDOR)/xterm/css
	cp -r $(NM)/@novnc/novnc/core $(NM)/@novnc/novnc/vendor $(NM)/@novnc/novnc/LICENSE.txt $(VENDOR)/novnc/
	cp $(NM)/@xterm/xterm/lib/xterm.mjs $(NM)/@xterm/xterm/lib/xterm.mjs.map $(VENDOR)/xterm/lib/
	cp $(NM)/@xterm/xterm/css/xterm.css $(VENDOR)/xterm/css/
	cp $(NM)/@xterm/xterm/LICENSE $(VENDOR)/xterm/
	for a in $(XTERM_ADDONS); do mkdir -p $(VENDOR)/xterm/addon-$$a && \
	  cp $(NM)/@xterm/addon-$$a/lib/addon-$$a.mjs $(NM)/@xterm/addon-$$a/lib/addon-$$a.mjs.map $(NM)/@xterm/addon-$$a/LICENSE $(VENDOR)/xterm/addon-$$a/ || exit 1; done
	@touch $@

assets: $(VENDOR)/novnc/core/rfb.js ## fetch the pinned npm assets (npm ci) and stage them for go:embed

build: assets ## build bin/deskd, bin/panelgw and bin/deskd-bench
	$(GO) build -o $(BIN)/ ./cmd/...

deps: ## install what the desktop needs (Xvfb, Chromium, openbox, fonts, npm) on Debian/Ubuntu, or print the command
	scripts/deps.sh

run: deps build ## install what is missing, build, and start deskd on $(LISTEN) with the desktop
	$(BIN)/deskd start --listen $(LISTEN) --run-dir $(RUN_DIR)
	@echo "desktop: http://$(LISTEN)/vnc.html?autoconnect=true&resize=scale  terminal: http://$(LISTEN)/terminal/"
	@echo "stop with: $(BIN)/deskd stop --daemon --run-dir $(RUN_DIR)"

test: assets fmt vet ## gofmt and vet, every test (real Xvfb and Chromium), then the fuzz targets briefly
	DESKD_REQUIRE_ALL=1 $(GO) test $(TESTFLAGS) ./...
	$(GO) vet -tags purego ./jpegenc ./bridge ./h264enc # the portable code alone, without the AVX2 assembly:
	$(GO) test -tags purego -count=1 ./jpegenc && $(GO) test -tags purego -count=1 -run 'RowHash|Scroll' ./bridge && $(GO) test -tags purego -count=1 -run 'ToI420' ./h264enc
	$(GO) test -count=1 -run 'SlowLink|Congestion' ./bridge # rate recovery, at the speed its viewer decodes without -race
	cd images/desktop/k8s && $(GO) vet ./... && $(GO) test -count=1 ./...
	$(MAKE) fuzz
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
	@if command -v podman >/dev/null || command -v docker >/dev/null; then $(MAKE) image-test; \
	 else echo "make test: no podman or docker here: the image test (images/desktop/test_ctl.sh) did not run"; fi

fuzz: ## run each fuzz target for $(FUZZTIME) (.ci/fuzz)
	GO=$(GO) FUZZTIME=$(FUZZTIME) .ci/fuzz

fmt: ## fail if any file needs gofmt
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: assets ## go vet
	$(GO) vet ./...

check: test ## fmt + vet + test (make test runs all three)

bench: build ## measure deskd against its peers (bench/results/latest.json), then under faults, load and hostile input (reliability.json)
	$(BIN)/deskd-bench -out bench/results/latest.json
	$(BIN)/deskd-bench -reliability bench/results/reliability.json

image: ## build the desktop image with podman or docker (IMAGE=...; no registry needed: a Debian base is made here)
	IMAGE=$(IMAGE) GO=$(GO) images/desktop/build.sh

image-test: image ## run images/desktop/test_ctl.sh against the image
	IMAGE=$(IMAGE) images/desktop/test_ctl.sh

clean: ## remove built binaries and staged assets
	rm -rf $(BIN) $(VENDOR)
