# Targets a newcomer can guess. CI runs `make check` (= bash .ci/run).
.PHONY: demo test bench fuzz model lint check build deploy-check

build:
	go build -o bin/chainsync ./cmd/chainsync

demo:
	go run ./cmd/chainsync demo

test:
	go test -race ./...

bench:
	go test -run '^$$' -bench . -benchmem ./...

fuzz:
	@for pkg in $$(go list ./...); do \
	  for t in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    go test -run '^$$' -fuzz "^$$t\$$" -fuzztime 30s $$pkg || exit 1; \
	  done; \
	done

model:
	bash model/check

lint:
	gofmt -l . | (! grep .)
	go vet ./...
	staticcheck ./...

check:
	bash .ci/run

# The deployment files tried for real (as root): chainsync@.service under
# systemd, the Dockerfile with podman, deploy/kubernetes against a real
# kube-apiserver. See deploy/check/run.
deploy-check:
	bash deploy/check/run
