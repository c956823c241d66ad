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

# need CMD PACKAGE...: install Debian packages unless CMD is there.
need() {
  local cmd=$1
  shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  say "installing $* (Debian)"
  if [ -z "${apt_updated:-}" ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

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

# The chainsync binary of this tree (go build ./cmd/chainsync): built once
# by deploy/check/run, which exports DEPLOY_CHECK_BIN, or here by a part
# run on its own.
chainsync_bin() {
  if [ -z "${DEPLOY_CHECK_BIN:-}" ]; then
    DEPLOY_CHECK_BIN=$(mktemp -d)/chainsync
    say "go build ./cmd/chainsync" >&2
    (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$DEPLOY_CHECK_BIN" ./cmd/chainsync) || fail "go build ./cmd/chainsync"
    export DEPLOY_CHECK_BIN
  fi
  echo "$DEPLOY_CHECK_BIN"
}
