#!/usr/bin/env bash
# deploy/check/container.sh: the Dockerfile, built and run with podman.
#
# The Dockerfile is built as it is. Its base images cannot be pulled here
# (no container registry is reachable from this machine), so this script
# first makes local stand-ins under the same names, and builds with
# --pull=never so that nothing is pulled:
#   golang:1.26  = a Debian 12 tree (debootstrap, cached) with this
#                  machine's own Go toolchain in /usr/local/go, the CA roots
#                  in /etc/ssl/certs and the official image's environment
#                  (PATH, GOPATH=/go, GOTOOLCHAIN=local), its build cache
#                  holding the standard library (speed only);
#   busybox:1.37 = Debian's busybox-static (1.35) with its applets linked.
# A user with a registry builds the same Dockerfile on the real images.
# Then it checks:
#   1. the default image runs (`version`), as 65532:65532, and holds
#      nothing but the binary and the CA roots: no shell;
#   2. the same run check fails on a seeded broken copy of the Dockerfile
#      whose binary cannot run, so the check can fail;
#   3. three `--target example` containers sharing one network namespace
#      (loopback only) run a chain with mutual TLS, tasks in order, and
#      all three exit 0.
# With --prepare it only makes the stand-ins.
set -euo pipefail
part=container
. "$(dirname "$0")/lib.sh"

need podman podman
need runc runc
need dpkg-deb dpkg
# No systemd on a CI host of this kind: cgroups by hand, events to a file;
# runc, since crun refuses the hybrid cgroup hierarchy such a host has.
# Images and layers live under the cache (the stand-ins and the build
# stage's layers are kept for next time), not in the machine's own podman
# storage.
# Its run-time state under /run, one directory per cache.
pmrun=/run/chainsync-deploy-check/$(echo "$CACHE" | sha256sum | cut -c1-8)
pm() {
  podman --root "$CACHE/containers/storage" --runroot "$pmrun/storage" --tmpdir "$pmrun/libpod" \
    --cgroup-manager=cgroupfs --events-backend=file --runtime=runc "$@"
}
# podman's default limits for a root container (1048576 open files) are
# above the hard limits of this kind of machine, where a process cannot
# raise its own (runc then fails with "error setting rlimit type 7"), so
# every container gets this host's own open-file limit and a process limit
# below the host's.
ulimits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=32768:32768)
prun() { pm run --pull=never "${ulimits[@]}" "$@"; }
# The storage is only a cache: one podman cannot open (made with other
# settings, say) is started afresh.
if ! pm images >/dev/null 2>&1; then
  say "podman cannot use $CACHE/containers ($(pm images 2>&1 | tail -1)): starting it afresh"
  rm -rf --one-file-system "$CACHE/containers" "$pmrun"
  pm images >/dev/null || fail "podman does not start"
fi

work=$(mktemp -d /tmp/chainsync-container.XXXXXX)
on_exit "rm -rf '$work'"
standin=io.chainsync.deploy-check.standin

# A stand-in is made again when its recipe (the Go version, the busybox
# package) changes.
standin_current() { # IMAGE KEY
  pm image exists "$1" && [ "$(pm image inspect --format "{{index .Labels \"$standin\"}}" "$1")" = "$2" ]
}

# golang:1.26 = Debian 12 (the tree systemd.sh boots) with this machine's
# Go toolchain, the CA roots and the official image's environment. Unlike
# the real image, its build cache already holds the standard library,
# compiled as the Dockerfile's go build compiles it (CGO_ENABLED=0,
# -trimpath, the same GOROOT), so that each check compiles only
# chainsync's own packages: that changes the time, not the binary.
golang=docker.io/library/golang:1.26
gokey="$(go env GOVERSION) $(go env GOROOT) std-cached"
if ! standin_current "$golang" "$gokey"; then
  tree=$(debian_tree)
  [ -f /etc/ssl/certs/ca-certificates.crt ] || need update-ca-certificates ca-certificates
  say "making the stand-in $golang: Debian 12 + $(go env GOVERSION) from $(go env GOROOT)"
  extra=$work/golang-extra
  mkdir -p "$extra/usr/local" "$extra/etc/ssl/certs" "$extra/go"
  cp -a "$(go env GOROOT)" "$extra/usr/local/go"
  cp /etc/ssl/certs/ca-certificates.crt "$extra/etc/ssl/certs/"
  mkdir -p "$extra/root/.cache"
  GOCACHE=$extra/root/.cache/go-build GOFLAGS= CGO_ENABLED=0 go build -trimpath std ||
    fail "go build std for the stand-in's build cache"
  # Each path once: the tree has no /usr/local/go, /go, CA bundle or cache.
  for p in usr/local/go go etc/ssl/certs/ca-certificates.crt root/.cache; do
    [ ! -e "$tree/$p" ] || fail "the Debian tree already has /$p"
  done
  tar -C "$tree" -c . -C "$extra" usr/local/go go etc/ssl/certs/ca-certificates.crt root/.cache |
    pm import -q \
      --change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV GOPATH=/go' --change 'ENV GOTOOLCHAIN=local' \
      --change 'WORKDIR /go' --change 'CMD ["bash"]' \
      --change "LABEL $standin=$gokey" - "$golang" >/dev/null ||
    fail "podman import of the golang stand-in"
  rm -rf "$extra"
fi

# busybox:1.37 = Debian's busybox-static with its applets linked.
busybox=docker.io/library/busybox:1.37
bbdeb() { apt-cache policy busybox-static 2>/dev/null | awk '/Candidate:/ {print $2}'; }
v=$(bbdeb)
case "$v" in "" | "(none)") apt_lists; v=$(bbdeb) ;; esac
if ! standin_current "$busybox" "busybox-static $v"; then
  say "making the stand-in $busybox from Debian's busybox-static $v"
  (cd "$work" && apt-get download -q "busybox-static=$v" >"$work/download.log" 2>&1) || fail "apt-get download busybox-static"
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/bb.deb"
  bb=$work/bb
  mkdir -p "$bb/bin" "$bb/etc" "$bb/tmp" "$bb/root"
  chmod 1777 "$bb/tmp"
  cp "$work/bb.deb/bin/busybox" "$bb/bin/busybox"
  for a in $("$bb/bin/busybox" --list); do [ -e "$bb/bin/$a" ] || ln -s busybox "$bb/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$bb/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$bb/etc/group"
  tar -C "$bb" -c . | pm import -q --change 'CMD ["sh"]' --change "LABEL $standin=busybox-static $v" - "$busybox" >/dev/null ||
    fail "podman import of the busybox stand-in"
fi
if prepare_only "${1:-}"; then say "prepared: $golang and $busybox (stand-ins)"; exit 0; fi
chainsync_bin

# build DOCKERFILE TAG [ARGS]: podman build of the tree, nothing pulled.
build() {
  local df=$1 tag=$2
  shift 2
  pm build -q --pull=never --network=none -f "$df" -t "$tag" "$@" "$REPO" >"$work/build.log" 2>&1
}
image=localhost/chainsync:deploy-check
example=localhost/chainsync:deploy-check-example
# The build stage gets a name of its own, so that the one of the last run
# is kept as a layer cache while older ones are pruned at the end.
say "podman build --target build (the go build inside the golang stand-in)"
build "$DOCKERFILE" "$image-build" --target build || { tail -30 "$work/build.log"; fail "podman build --target build"; }
on_exit "pm image prune -f >/dev/null 2>&1"
say "podman build of the Dockerfile (default target)"
build "$DOCKERFILE" "$image" || { tail -30 "$work/build.log"; fail "podman build"; }
say "podman build --target example"
build "$DOCKERFILE" "$example" --target example || { tail -30 "$work/build.log"; fail "podman build --target example"; }

say "1. the default image"
# runs IMAGE: it prints its version.
runs() { prun --rm --network=none "$1" version 2>&1 | grep -q '^chainsync [0-9]'; }
runs "$image" || fail "the image does not run: $(prun --rm --network=none "$image" version 2>&1 | tail -3)"
say "   $(prun --rm --network=none "$image" version)"
user=$(pm image inspect --format '{{.Config.User}}' "$image")
[ "$user" = 65532:65532 ] || fail "the image runs as '$user', want 65532:65532"
size=$(pm image inspect --format '{{.Size}}' "$image")
[ "$size" -lt 30000000 ] || fail "the image is $size bytes; a static binary on scratch should be far less"
# No shell: running one fails for want of the file (once the same image
# ran its binary above, so nothing else is in the way).
if out=$(prun --rm --network=none --entrypoint /bin/sh "$image" -c true 2>&1); then
  fail "the default image has a shell"
fi
case "$out" in *"/bin/sh"*"no such file"* | *"/bin/sh"*"not found"*) ;; *) fail "running /bin/sh failed, but not for want of it: $out" ;; esac
# Nothing but the binary and the CA roots (the empty files and directories
# podman makes for its mounts aside).
pm create --name "chainsync-check-$$-files" "$image" >/dev/null
on_exit "pm rm -f 'chainsync-check-$$-files' >/dev/null 2>&1"
files=$(pm export "chainsync-check-$$-files" | tar -tvf - | awk '$1 !~ /^d/ && $3 != 0 {print $NF}' | sort | tr '\n' ' ')
[ "$files" = "chainsync etc/ssl/certs/ca-certificates.crt " ] || fail "the default image holds more than its binary and the CA roots: $files"
say "   user $user, $((size / 1000)) kB, files: $files(no shell)"

say "2. a broken Dockerfile (its binary cannot run) fails the same check"
# The binary copied in without its execute bit.
sed 's|^COPY --from=build /out/chainsync /chainsync$|COPY --chmod=0644 --from=build /out/chainsync /chainsync|' \
  "$DOCKERFILE" >"$work/Dockerfile.broken"
! cmp -s "$DOCKERFILE" "$work/Dockerfile.broken" || fail "could not seed the broken Dockerfile"
broken=localhost/chainsync:deploy-check-broken
build "$work/Dockerfile.broken" "$broken" || { tail -30 "$work/build.log"; fail "podman build of the broken Dockerfile"; }
on_exit "pm rmi -f '$broken' >/dev/null 2>&1"
if runs "$broken"; then fail "the run check passed an image whose binary cannot run"; fi
say "   rejected: $(prun --rm --network=none "$broken" version 2>&1 | tail -1)"

say "3. a chain of three example containers in one network namespace"
"$bin" certs --dir "$work/tls" --nodes A,B,C >/dev/null
mkdir -p "$work/out"
chown -R 65532:65532 "$work/tls" "$work/out"
chain=A=127.0.0.1:7101,B=127.0.0.1:7102,C=127.0.0.1:7103
names=()
for n in A B C; do
  name=chainsync-check-$$-$n
  if [ $n = A ]; then net=none; else net=container:chainsync-check-$$-A; fi
  prun -d --name "$name" --network "$net" \
    -v "$work/tls:/tls:ro" -v "$work/out:/out" \
    -e CHAINSYNC_CHAIN=$chain -e CHAINSYNC_NAME=$n \
    -e CHAINSYNC_TLS_CERT=/tls/$n.pem -e CHAINSYNC_TLS_KEY=/tls/$n-key.pem -e CHAINSYNC_TLS_CA=/tls/ca.pem \
    -e CHAINSYNC_HEARTBEAT=1s -e CHAINSYNC_CONNECT_TIMEOUT=2m \
    "$example" run -- sh -c 'echo "$CHAINSYNC_NODE start" >>/out/steps; sleep 1; echo "$CHAINSYNC_NODE end" >>/out/steps' \
    >/dev/null || fail "podman run $name"
  names+=("$name")
  on_exit "pm rm -f '$name' >/dev/null 2>&1"
done
logs() { for c in "${names[@]}"; do echo "--- $c:"; pm logs "$c" 2>&1 | tail -15; done; }
fail_hook=logs
exited() { [ "$(pm inspect --format '{{.State.Status}}' "$1")" = exited ]; }
for c in "${names[@]}"; do poll 120 "$c did not exit" exited "$c"; done
for c in "${names[@]}"; do
  code=$(pm inspect --format '{{.State.ExitCode}}' "$c")
  [ "$code" = 0 ] || fail "$c exited $code"
done
steps=$(tr '\n' ' ' <"$work/out/steps" | sed 's/ $//')
[ "$steps" = "A start A end B start B end C start C end" ] || fail "tasks out of order: $steps"
say "   tasks in order ($steps), all three exited 0"

say "ok"
