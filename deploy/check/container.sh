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
#                  (PATH, GOPATH=/go, GOTOOLCHAIN=local);
#   busybox:1.37 = Debian's busybox-static (1.35) with its applets linked.
# A user with a registry builds the same Dockerfile on the real images.
# Then it checks:
#   1. the default image runs (`version`), as 65532:65532, holds no shell;
#   2. the same run check fails on a seeded broken copy of the Dockerfile
#      whose binary cannot run, so the check can fail;
#   3. three `--target example` containers sharing one network namespace
#      (loopback only) run a chain with mutual TLS, tasks in order, and
#      all three exit 0.
set -euo pipefail
part=container
. "$(dirname "$0")/lib.sh"

need podman podman
need dpkg-deb dpkg
bin=$(chainsync_bin)
need runc runc
# No systemd on a CI host of this kind: cgroups by hand, events to a file;
# runc, since crun refuses the hybrid cgroup hierarchy such a host has.
pm() { podman --cgroup-manager=cgroupfs --events-backend=file --runtime=runc "$@"; }

work=$(mktemp -d /tmp/chainsync-container.XXXXXX)
on_exit "rm -rf '$work'"
standin=io.chainsync.deploy-check.standin

# A stand-in is rebuilt when its recipe (here, the Go version) changes; an
# image of that name that is not a stand-in (a real one) is used as it is.
standin_current() { # IMAGE KEY
  pm image exists "$1" || return 1
  local key
  key=$(pm image inspect --format "{{index .Labels \"$standin\"}}" "$1")
  [ "$key" = "$2" ] || [ "$key" = "<no value>" ] || [ -z "$key" ]
}

golang=docker.io/library/golang:1.26
gokey="$(go env GOVERSION)"
if ! standin_current "$golang" "$gokey"; then
  tree=$CACHE/debian-bookworm
  if [ ! -x "$tree/bin/sh" ]; then
    need debootstrap debootstrap
    say "debootstrap: a minimal Debian 12 into $tree (cached for next time)"
    rm -rf "$tree.tmp"
    mkdir -p "$CACHE"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus \
      bookworm "$tree.tmp" "$(debian_mirror)" >"$CACHE/debootstrap.log" 2>&1 ||
      { tail -20 "$CACHE/debootstrap.log"; fail "debootstrap (log: $CACHE/debootstrap.log)"; }
    mv "$tree.tmp" "$tree"
  fi
  [ -f /etc/ssl/certs/ca-certificates.crt ] || need update-ca-certificates ca-certificates
  say "making the stand-in $golang: Debian 12 + $(go env GOVERSION) from $(go env GOROOT)"
  extra=$work/golang-extra
  mkdir -p "$extra/usr/local" "$extra/etc/ssl/certs" "$extra/go"
  cp -a "$(go env GOROOT)" "$extra/usr/local/go"
  cp /etc/ssl/certs/ca-certificates.crt "$extra/etc/ssl/certs/"
  # Each path once: the tree has no /usr/local/go, /go or CA bundle.
  for p in usr/local/go go etc/ssl/certs/ca-certificates.crt; do
    [ ! -e "$tree/$p" ] || fail "the Debian tree already has /$p"
  done
  tar -C "$tree" -c . -C "$extra" usr/local/go go etc/ssl/certs/ca-certificates.crt |
    pm import -q \
      --change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV GOPATH=/go' --change 'ENV GOTOOLCHAIN=local' \
      --change 'WORKDIR /go' --change 'CMD ["bash"]' \
      --change "LABEL $standin=$gokey" - "$golang" >/dev/null ||
    fail "podman import of the golang stand-in"
  rm -rf "$extra"
fi

busybox=docker.io/library/busybox:1.37
if ! standin_current "$busybox" busybox-static; then
  say "making the stand-in $busybox from Debian's busybox-static"
  (cd "$work" && apt-get download -q busybox-static >/dev/null 2>&1) ||
    { apt-get update -qq && (cd "$work" && apt-get download -q busybox-static >/dev/null); } ||
    fail "apt-get download busybox-static"
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/bb.deb"
  bb=$work/bb
  mkdir -p "$bb/bin" "$bb/etc" "$bb/tmp" "$bb/root"
  chmod 1777 "$bb/tmp"
  cp "$work/bb.deb/bin/busybox" "$bb/bin/busybox"
  for a in $("$bb/bin/busybox" --list); do [ -e "$bb/bin/$a" ] || ln -s busybox "$bb/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$bb/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$bb/etc/group"
  tar -C "$bb" -c . | pm import -q --change 'CMD ["sh"]' --change "LABEL $standin=busybox-static" - "$busybox" >/dev/null ||
    fail "podman import of the busybox stand-in"
fi

# build DOCKERFILE TAG [ARGS]: podman build of the tree, nothing pulled.
build() {
  local df=$1 tag=$2
  shift 2
  pm build -q --pull=never --network=none -f "$df" -t "$tag" "$@" "$REPO" >"$work/build.log" 2>&1
}
image=localhost/chainsync:deploy-check
example=localhost/chainsync:deploy-check-example
say "podman build of the Dockerfile (default target)"
build "$REPO/Dockerfile" "$image" || { tail -30 "$work/build.log"; fail "podman build"; }
say "podman build --target example"
build "$REPO/Dockerfile" "$example" --target example || { tail -30 "$work/build.log"; fail "podman build --target example"; }
on_exit "pm rmi -f '$image' '$example' >/dev/null 2>&1"

say "1. the default image"
# runs IMAGE: it prints its version.
runs() { pm run --ulimit=host --rm --network=none "$1" version 2>&1 | grep -q '^chainsync [0-9]'; }
runs "$image" || fail "the image does not run: $(pm run --ulimit=host --rm --network=none "$image" version 2>&1 | tail -3)"
say "   $(pm run --ulimit=host --rm --network=none "$image" version)"
user=$(pm image inspect --format '{{.Config.User}}' "$image")
[ "$user" = 65532:65532 ] || fail "the image runs as '$user', want 65532:65532"
size=$(pm image inspect --format '{{.Size}}' "$image")
[ "$size" -lt 30000000 ] || fail "the image is $size bytes; a static binary on scratch should be far less"
if pm run --ulimit=host --rm --network=none --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1; then
  fail "the default image has a shell"
fi
say "   user $user, $((size / 1000)) kB, no shell"

say "2. a broken Dockerfile (its binary cannot run) fails the same check"
# The binary copied in without its execute bit.
sed 's|^COPY --from=build /out/chainsync /chainsync$|COPY --chmod=0644 --from=build /out/chainsync /chainsync|' \
  "$REPO/Dockerfile" >"$work/Dockerfile.broken"
! cmp -s "$REPO/Dockerfile" "$work/Dockerfile.broken" || fail "could not seed the broken Dockerfile"
broken=localhost/chainsync:deploy-check-broken
build "$work/Dockerfile.broken" "$broken" || { tail -30 "$work/build.log"; fail "podman build of the broken Dockerfile"; }
on_exit "pm rmi -f '$broken' >/dev/null 2>&1"
if runs "$broken"; then fail "the run check passed an image whose binary cannot run"; fi
say "   rejected: $(pm run --ulimit=host --rm --network=none "$broken" version 2>&1 | tail -1)"

say "3. a chain of three example containers in one network namespace"
"$bin" certs --dir "$work/tls" --nodes A,B,C >/dev/null
mkdir -p "$work/out"
chown -R 65532:65532 "$work/tls" "$work/out"
chain=A=127.0.0.1:7101,B=127.0.0.1:7102,C=127.0.0.1:7103
names=()
for n in A B C; do
  name=chainsync-check-$$-$n
  if [ $n = A ]; then net=none; else net=container:chainsync-check-$$-A; fi
  pm run --ulimit=host -d --name "$name" --network "$net" \
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
