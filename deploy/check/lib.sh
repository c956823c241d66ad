# Shared by the scripts of deploy/check: messages, polling with deadlines,
# clean-up on exit, and the cache. Sourced, not run.

CACHE=${DEPLOY_CHECK_CACHE:-/var/cache/chainsync-deploy-check}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

part=${part:-deploy-check}
t_part=$(date +%s)
say() { printf '[%s %3ss] %s\n' "$part" "$(($(date +%s) - t_part))" "$*"; }
fail() {
  printf '\n[%s] FAIL: %s\n' "$part" "$*" >&2
  if [ -n "${fail_hook:-}" ]; then "$fail_hook" >&2 || true; fi
  exit 1
}

# Clean-up actions run in reverse order on exit, whatever the outcome.
cleanups=()
on_exit() { cleanups+=("$1"); }
run_cleanups() {
  local i
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
}
trap run_cleanups EXIT
trap 'exit 130' INT TERM

# poll SECONDS WHAT CMD...: run CMD every 0.2s until it succeeds; fail
# with WHAT if it has not within SECONDS.
poll() {
  local secs=$1 what=$2
  shift 2
  local end=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$end" ]; then fail "after ${secs}s: $what"; fi
    sleep 0.2
  done
}

# aptget: apt-get, one at a time (the parts may run at once: deploy/check/run
# prepare), waiting for another's dpkg lock rather than failing.
aptget() {
  mkdir -p "$CACHE"
  (flock 9 && DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600 "$@") 9>"$CACHE/apt.lock"
}
# apt_lists: Debian's package lists, updated once a day.
apt_lists() {
  [ -e "$CACHE/apt-updated.$(date +%F)" ] && return 0
  aptget update && touch "$CACHE/apt-updated.$(date +%F)"
}
# need CMD PACKAGE...: install Debian packages unless CMD is there.
need() {
  local cmd=$1
  shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  say "installing $* (Debian)" >&2
  apt_lists && aptget install -y --no-install-recommends "$@" >/dev/null || fail "apt-get install $*"
}

# debian_tree: prints the path of a minimal Debian 12 tree with systemd,
# made by debootstrap once and kept in the cache (systemd.sh boots it,
# container.sh makes the golang stand-in from it). Under a lock: two parts
# may want it at once.
debian_tree() {
  local tree=$CACHE/debian-bookworm
  mkdir -p "$CACHE"
  (
    flock 9
    if [ ! -x "$tree/lib/systemd/systemd" ]; then
      need debootstrap debootstrap
      say "debootstrap: a minimal Debian 12 with systemd into $tree (cached for next time)" >&2
      # A debootstrap cut short may have left its mounts (proc, sys, the
      # host's /dev bound in): those go first, and rm stays on the tree's
      # own file system whatever is left.
      if [ -d "$tree.tmp" ]; then
        findmnt -rn -o TARGET | grep -F "$tree.tmp/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
        rm -rf --one-file-system "$tree.tmp"
      fi
      debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus \
        bookworm "$tree.tmp" "$(debian_mirror)" >"$CACHE/debootstrap.log" 2>&1 ||
        { tail -20 "$CACHE/debootstrap.log" >&2; fail "debootstrap (log: $CACHE/debootstrap.log)"; }
      mv "$tree.tmp" "$tree"
    fi
  ) 9>"$CACHE/debian-bookworm.lock" || exit 1
  echo "$tree"
}

# What the checks check, normally the files of this tree. Another file
# can be given to see a check fail on it (deploy/check/run --broken does,
# with seeded broken copies).
UNIT=${DEPLOY_CHECK_UNIT:-$REPO/deploy/systemd/chainsync@.service}
DOCKERFILE=${DEPLOY_CHECK_DOCKERFILE:-$REPO/Dockerfile}
MANIFESTS=${DEPLOY_CHECK_MANIFESTS:-$REPO/deploy/kubernetes}

# prepare_only: true when the part was asked (--prepare) to make what is
# slow and cacheable, then stop before its checks.
prepare_only() { [ "${1:-}" = --prepare ]; }

# The Debian mirror apt is configured with (the one debootstrap uses).
debian_mirror() {
  local m=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
  fi
  [ -n "$m" ] || fail "no Debian mirror configured for apt"
  echo "$m"
}

# chainsync_bin: sets bin to the chainsync binary of this tree (go build
# ./cmd/chainsync, as the Dockerfile builds it): built once by
# deploy/check/run, which exports DEPLOY_CHECK_BIN, or here by a part run
# on its own.
chainsync_bin() {
  if [ -z "${DEPLOY_CHECK_BIN:-}" ]; then
    local d
    d=$(mktemp -d /tmp/chainsync-bin.XXXXXX)
    on_exit "rm -rf '$d'"
    say "go build ./cmd/chainsync"
    (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$d/chainsync" ./cmd/chainsync) || fail "go build ./cmd/chainsync"
    DEPLOY_CHECK_BIN=$d/chainsync
    export DEPLOY_CHECK_BIN
  fi
  bin=$DEPLOY_CHECK_BIN
}
