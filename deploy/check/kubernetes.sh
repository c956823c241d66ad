#!/usr/bin/env bash
# deploy/check/kubernetes.sh: the manifests of deploy/kubernetes, sent to a
# real Kubernetes API server.
#
# The API server is the release's own code (k8s.io/kubernetes's
# cmd/kube-apiserver/app at the version pinned in deploy/check/kube/go.mod)
# with an etcd embedded in the same process, and kubectl is built from the
# same release: both from the Go module proxy, built once and kept in the
# cache (cold: several minutes of both cores; see deploy/kubernetes/README.md).
# It listens on 127.0.0.1 only, with its data in a temporary directory, and
# runs no controller, scheduler or kubelet. Then:
#   1. kubectl apply --dry-run=server --validate=strict of every manifest:
#      every object is accepted (schema, unknown fields, enums, defaults,
#      validation and admission, as on a cluster of that version);
#   2. seeded broken copies of the manifests (a misspelt field, a value
#      outside its enum, a selector that does not match its template) are
#      each rejected, with the reason, so the check can fail.
# What it does not prove: that a pod runs (no kubelet, no image).
set -euo pipefail
part=kubernetes
. "$(dirname "$0")/lib.sh"

kube=$REPO/deploy/check/kube
k8s=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$kube/go.mod")
# The compile of some 2,200 packages is what takes long, so: no cgo, no
# optimization, no inlining, no debug information (a third less CPU than a
# release build; the check needs the server's decisions, not its speed),
# no symbol tables (a shorter link), and the release's version, as its
# own build stamps it.
minor=${k8s#v1.}
minor=${minor%%.*}
flags=(-trimpath -gcflags='all=-N -l -dwarf=false'
  -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean")
# The binaries are kept per recipe: the module, its sums, the program, Go
# and the flags.
key=$( (cat "$kube/go.mod" "$kube/go.sum" "$kube"/apiserver/*.go; go env GOVERSION; echo "${flags[@]}") | sha256sum | cut -c1-16)
bindir=$CACHE/kube/bin-$key
mkdir -p "$CACHE/kube"
(
  flock 9
  if [ ! -x "$bindir/apiserver" ] || [ ! -x "$bindir/kubectl" ]; then
    say "building kube-apiserver $k8s (etcd embedded) and kubectl from the Go module proxy (cold: minutes; cached in $bindir)"
    rm -rf "$bindir.tmp"
    mkdir -p "$bindir.tmp"
    # Their own module and build caches, under the cache.
    export GOMODCACHE=$CACHE/kube/gomod GOCACHE=$CACHE/kube/gocache GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0
    s=$(date +%s)
    (cd "$kube" && go build "${flags[@]}" -o "$bindir.tmp/apiserver" ./apiserver) >"$CACHE/kube/build.log" 2>&1 ||
      { tail -20 "$CACHE/kube/build.log"; fail "go build of the API server (log: $CACHE/kube/build.log)"; }
    say "built the API server in $(($(date +%s) - s))s"
    s=$(date +%s)
    (cd "$kube" && go build "${flags[@]}" -o "$bindir.tmp/kubectl" k8s.io/kubernetes/cmd/kubectl) >>"$CACHE/kube/build.log" 2>&1 ||
      { tail -20 "$CACHE/kube/build.log"; fail "go build of kubectl (log: $CACHE/kube/build.log)"; }
    say "built kubectl in $(($(date +%s) - s))s"
    echo "$k8s" >"$bindir.tmp/version"
    # Older recipes' binaries go; the build cache stays for the next one.
    for d in "$CACHE"/kube/bin-*; do case "$d" in *.tmp) ;; *) rm -rf "$d" ;; esac; done
    mv "$bindir.tmp" "$bindir"
  fi
) 9>"$CACHE/kube/build.lock" || exit 1
version=$(cat "$bindir/version")
if prepare_only "${1:-}"; then say "prepared: kube-apiserver and kubectl $version in $bindir"; exit 0; fi

work=$(mktemp -d /tmp/chainsync-kubernetes.XXXXXX)
on_exit "rm -rf '$work'"
export KUBECONFIG=$work/api/kubeconfig
kubectl=("$bindir/kubectl" --request-timeout=30s)

say "starting kube-apiserver $version with an embedded etcd on 127.0.0.1"
"$bindir/apiserver" -dir "$work/api" >"$work/apiserver.log" 2>&1 &
api=$!
on_exit "kill $api 2>/dev/null; wait $api 2>/dev/null"
dump() { echo "--- apiserver log:"; tail -30 "$work/apiserver.log"; }
fail_hook=dump
# Ready: /readyz says ok and the default namespace exists (the manifests
# go there). Or gone.
ready_or_gone() {
  ! kill -0 "$api" 2>/dev/null || {
    [ "$("${kubectl[@]}" get --raw /readyz 2>/dev/null)" = ok ] &&
      "${kubectl[@]}" get namespace default >/dev/null 2>&1
  }
}
poll 180 "the API server is not ready" ready_or_gone
kill -0 "$api" 2>/dev/null || fail "the API server exited"
fail_hook=""
say "   ready: $("${kubectl[@]}" version -o json 2>/dev/null | awk -F'"' '/gitVersion/ {v = $4} END {print "server " v}')"

# dry_run FILE: kubectl apply --dry-run=server of FILE; prints what kubectl
# said, and fails as kubectl does.
dry_run() { "${kubectl[@]}" apply --dry-run=server --validate=strict -f "$1" 2>&1; }

say "1. every manifest of $MANIFESTS, server-side dry run"
manifests=("$MANIFESTS"/*.yaml)
[ -e "${manifests[0]}" ] || fail "no manifests in $MANIFESTS"
for m in "${manifests[@]}"; do
  out=$(dry_run "$m") || fail "$(basename "$m") was rejected: $out"
  # Every object of the file, each accepted.
  want=$(grep -c '^kind:' "$m")
  got=$(grep -c '(server dry run)$' <<<"$out" || true)
  [ "$got" = "$want" ] || fail "$(basename "$m"): $got of its $want objects accepted: $out"
  while read -r line; do say "   $(basename "$m"): $line"; done <<<"$out"
done

say "2. seeded broken copies, each rejected for what was broken"
# FILE | WHAT | SED SCRIPT | what the API server must say
seeds=(
  "statefulset.yaml|a misspelt field|s/^  podManagementPolicy:/  podManagmentPolicy:/|unknown field \"spec.podManagmentPolicy\""
  "statefulset.yaml|a value outside its enum|s/^  podManagementPolicy: Parallel/  podManagementPolicy: Paralel/|Invalid value: \"Paralel\""
  "statefulset.yaml|a selector that does not match the template|/^  selector:/,/^  template:/ s#app.kubernetes.io/name: chainsync\$#app.kubernetes.io/name: chainsync-other#| does not match template"
  "rollout-job.yaml|a misspelt field|s/^  backoffLimit:/  backofLimit:/|unknown field \"spec.backofLimit\""
  "rollout-job.yaml|a value outside its enum|s/^  completionMode: Indexed/  completionMode: Indexd/|Unsupported value: \"Indexd\""
  "rollout-job.yaml|a selector that does not match the template|s/^  completionMode: Indexed/  completionMode: Indexed\\n  manualSelector: true\\n  selector: {matchLabels: {job-name: other}}/| does not match template"
  "rollout-job.yaml|a misspelt field (its Service)|s/^  publishNotReadyAddresses:/  publishNotReadyAdresses:/|unknown field \"spec.publishNotReadyAdresses\""
  "service.yaml|a misspelt field|s/^  publishNotReadyAddresses:/  publishNotReadyAdresses:/|unknown field \"spec.publishNotReadyAdresses\""
  "service.yaml|a value outside its enum|s/^  clusterIP: None/  clusterIP: None\\n  sessionAffinity: Sticky/|Unsupported value: \"Sticky\""
)
mkdir -p "$work/broken"
n=0
for s in "${seeds[@]}"; do
  IFS='|' read -r file what script want <<<"$s"
  [ -f "$MANIFESTS/$file" ] || continue
  n=$((n + 1))
  b=$work/broken/$n-$file
  sed -e "$script" "$MANIFESTS/$file" >"$b"
  ! cmp -s "$MANIFESTS/$file" "$b" || fail "could not seed $what into $file (sed: $script)"
  if out=$(dry_run "$b"); then fail "$file with $what was accepted: $out"; fi
  case "$out" in *"$want"*) ;; *) fail "$file with $what was rejected, but not for that (want '$want'): $out" ;; esac
  say "   $file, $what: rejected: $(grep -o "[^:]*$want[^;]*" <<<"$out" | head -1 | sed 's/^ *//')"
done
[ "$n" -ge 6 ] || fail "only $n seeded copies: the manifests changed; update the seeds"
say "ok"
