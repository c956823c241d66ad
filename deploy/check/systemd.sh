#!/usr/bin/env bash
# deploy/check/systemd.sh: chainsync@.service under a real systemd.
#
# Boots systemd (Debian 12, from debootstrap, cached) in a systemd-nspawn
# container with a private network (loopback only), installs the binary
# and the unit as a user would, with env files made from
# deploy/systemd/B.env.example by editing its values, and runs:
#   0. systemd-analyze verify of the unit: no warning at all (a misspelt
#      directive is only a warning to systemd, so a seeded one must be
#      caught here too);
#   1. a 3-node chain as chainsync@A/B/C: each start returns with the unit
#      active and a STATUS= line shown by systemctl status, the tasks run
#      in order, every unit ends inactive with exit 0;
#   2. a node that cannot start fails systemctl start (before READY=1);
#   3. systemctl stop of a waiting node leaves it inactive, not failed;
#   4. a task that fails leaves its unit failed with exit status 3;
#   5. with the restart drop-in of docs/RESTARTS.md (taken from the doc),
#      a node SIGKILLed inside its task is restarted and resumes from its
#      state directory: its task is not run again and the chain finishes.
# With --prepare it only makes the Debian tree (and installs the tools).
set -euo pipefail
part=systemd
. "$(dirname "$0")/lib.sh"

need systemd-nspawn systemd-container
need nsenter util-linux
tree=$(debian_tree)
if prepare_only "${1:-}"; then say "prepared: $tree"; exit 0; fi
chainsync_bin

work=$(mktemp -d /tmp/chainsync-systemd.XXXXXX)
root=$work/root
on_exit "rm -rf '$work'"
say "copying the tree to $root"
cp -a "$tree" "$root"

# Installed as a user would: the binary, the unit, env files.
install -m 0755 "$bin" "$root/usr/local/bin/chainsync"
cp "$UNIT" "$root/etc/systemd/system/chainsync@.service"
mkdir -p "$root/etc/chainsync"
# The task: says when it starts and ends; "fail" fails, "hang" waits to be
# killed.
cat >"$root/usr/local/bin/step" <<'EOF'
#!/bin/sh
echo "$CHAINSYNC_NODE start" >>/var/log/steps
case "$1" in
fail) exit 1 ;;
hang) sleep 600 ;;
esac
sleep 1
echo "$CHAINSYNC_NODE end" >>/var/log/steps
EOF
chmod 0755 "$root/usr/local/bin/step"
# Stand-ins for the example's health check and pager.
printf '#!/bin/sh\nexit 0\n' >"$root/usr/local/bin/switch-healthy"
printf '#!/bin/sh\necho "fault: $*" >>/var/log/pages\n' >"$root/usr/local/bin/page-oncall"
chmod 0755 "$root/usr/local/bin/switch-healthy" "$root/usr/local/bin/page-oncall"
chain=A=127.0.0.1:7101,B=127.0.0.1:7102,C=127.0.0.1:7103
"$bin" certs --dir "$root/etc/chainsync" --chain "$chain" >/dev/null

machine=csdc$$
say "booting systemd in a container (systemd-nspawn --boot --private-network)"
systemd-nspawn -q -D "$root" -M "$machine" --register=no --keep-unit \
  --private-network --boot --console=passive >"$work/nspawn.log" 2>&1 &
nspawn=$!
on_exit "stop_container"
stop_container() {
  if kill -0 "$nspawn" 2>/dev/null; then
    in_ct systemctl poweroff >/dev/null 2>&1 || kill "$nspawn" 2>/dev/null || true
    local i
    for i in $(seq 100); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$nspawn" 2>/dev/null || true
    wait "$nspawn" 2>/dev/null || true
  fi
}
leader=""
find_leader() {
  leader=$(cat /proc/"$nspawn"/task/*/children 2>/dev/null | awk '{print $1; exit}')
  [ -n "$leader" ]
}
in_ct() { nsenter -t "$leader" -m -u -i -n -p -C -- "$@"; }
booted() { find_leader && case "$(in_ct systemctl is-system-running 2>/dev/null)" in running | degraded) true ;; *) false ;; esac; }
dump() {
  echo "--- nspawn:"; tail -20 "$work/nspawn.log"
  if [ -n "$leader" ]; then
    echo "--- steps:"; in_ct cat /var/log/steps 2>/dev/null || true
    echo "--- units:"; in_ct systemctl list-units --all --no-pager 'chainsync@*' 2>/dev/null || true
    echo "--- journal:"; in_ct journalctl --no-pager -n 80 -u 'chainsync@*' 2>/dev/null || true
  fi
}
fail_hook=dump
poll 120 "systemd in the container did not reach running" booted
say "systemd is running in the container (pid $leader on the host)"

# env NODE ROUND [TASK ARGS]: /etc/chainsync/NODE.env from the example,
# its values edited for this container.
env_file() {
  local node=$1 round=$2 task=$3
  sed -e "s|^CHAINSYNC_CHAIN=.*|CHAINSYNC_CHAIN=$chain|" \
    -e "s|^CHAINSYNC_ROUND_ID=.*|CHAINSYNC_ROUND_ID=$round|" \
    -e "s|/etc/chainsync/B|/etc/chainsync/$node|g" \
    -e "s|/var/lib/chainsync/B|/var/lib/chainsync/$node|" \
    -e "s|^TASK=.*|TASK=\"$task\"|" \
    "$REPO/deploy/systemd/B.env.example" >"$root/etc/chainsync/$node.env"
  grep -q "^CHAINSYNC_CHAIN=$chain\$" "$root/etc/chainsync/$node.env" &&
    grep -q "^TASK=\"$task\"\$" "$root/etc/chainsync/$node.env" ||
    fail "B.env.example no longer has the CHAINSYNC_CHAIN= and TASK= lines this check edits"
}
prop() { in_ct systemctl show -p "$2" --value "chainsync@$1.service"; }
is_state() { [ "$(prop "$1" ActiveState)" = "$2" ]; }
steps() { in_ct cat /var/log/steps 2>/dev/null | tr '\n' ' ' | sed 's/ $//'; }
reset() {
  in_ct systemctl reset-failed 'chainsync@*' >/dev/null 2>&1 || true
  in_ct rm -rf /var/log/steps /var/lib/chainsync
}
expect_end() { # NODE STATE RESULT STATUS
  local node=$1
  poll 120 "chainsync@$node did not end (state: $(prop "$node" ActiveState))" \
    eval "! is_state $node active && ! is_state $node activating && ! is_state $node deactivating"
  [ -n "$(prop "$node" InvocationID)" ] || fail "chainsync@$node: not loaded, its exit status cannot be read"
  local got="$(prop "$node" ActiveState) $(prop "$node" Result) $(prop "$node" ExecMainStatus)"
  [ "$got" = "$2 $3 $4" ] || fail "chainsync@$node ended $got, want $2 $3 $4"
}

say "0. systemd-analyze verify chainsync@A.service"
verify() { # prints any complaint of systemd about the unit
  in_ct systemd-analyze verify "$1" 2>&1 || true
}
env_file A r0 /usr/local/bin/step
out=$(verify chainsync@A.service)
[ -z "$out" ] || fail "systemd-analyze verify complains about the unit: $out"
# The same check must catch a misspelt directive (systemd itself only
# warns and ignores the line).
sed 's/^KillMode=/KilMode=/' "$root/etc/systemd/system/chainsync@.service" >"$root/etc/systemd/system/typo@.service"
out=$(verify typo@x.service)
case "$out" in *KilMode*) ;; *) fail "a misspelt directive (KilMode=) went unnoticed: '$out'" ;; esac
rm "$root/etc/systemd/system/typo@.service"
in_ct systemctl daemon-reload
# Enabled, as B.env.example says for a node that must come back after a
# reboot; this also keeps an ended unit loaded, so that its result and
# exit status can be read.
in_ct systemctl enable -q chainsync@A chainsync@B chainsync@C

say "1. a chain of three units, A, B, C"
reset
for n in A B C; do env_file $n r1 /usr/local/bin/step; done
for n in A B C; do
  in_ct systemctl start chainsync@$n || fail "systemctl start chainsync@$n"
  # systemctl start of a Type=notify unit returns once READY=1 came.
  st=$(prop $n ActiveState)
  [ "$st" = active ] || fail "chainsync@$n is $st right after systemctl start"
  [ "$(prop $n Type)" = notify ] || fail "chainsync@$n is not Type=notify"
done
poll 30 "systemctl status chainsync@C shows no Status: line" \
  eval "in_ct systemctl status --no-pager chainsync@C | grep -q 'Status: \"'"
say "   $(in_ct systemctl status --no-pager chainsync@C | grep 'Status:' | sed 's/^ *//')"
for n in A B C; do expect_end $n inactive success 0; done
[ "$(steps)" = "A start A end B start B end C start C end" ] || fail "tasks out of order: $(steps)"
for n in A B C; do
  in_ct journalctl --no-pager -u chainsync@$n | grep -q 'Deactivated successfully' ||
    fail "chainsync@$n: no 'Deactivated successfully' in its journal"
done
say "   tasks in order: $(steps); A, B, C inactive, exit 0"

say "2. a node that cannot start fails systemctl start"
reset
env_file A r2 /usr/local/bin/step
echo CHAINSYNC_HEARTBEAT=often >>"$root/etc/chainsync/A.env"
if in_ct systemctl start chainsync@A 2>/dev/null; then fail "systemctl start succeeded with a bad setting"; fi
expect_end A failed exit-code 2

say "3. systemctl stop of a waiting node"
reset
for n in A B; do env_file $n r3 /usr/local/bin/step; done
in_ct systemctl start chainsync@A chainsync@B
poll 10 "chainsync@B not active" is_state B active
in_ct systemctl stop chainsync@B
expect_end B inactive success 130
in_ct systemctl stop chainsync@A
expect_end A inactive success 130
say "   stopped: inactive (exit 130 counts as success), not failed"

say "4. a task that fails"
reset
env_file A r4 /usr/local/bin/step
env_file B r4 "/usr/local/bin/step fail"
env_file C r4 /usr/local/bin/step
in_ct systemctl start chainsync@A chainsync@B chainsync@C
expect_end B failed exit-code 3
for n in A C; do
  poll 60 "chainsync@$n still running after B's task failed" eval "! is_state $n active"
done
case "$(steps)" in *"C start"*) fail "C ran its task after B's failed: $(steps)" ;; esac
say "   B failed (exit 3); C never ran its task"

say "5. the restart drop-in of docs/RESTARTS.md: a node SIGKILLed in its task resumes"
reset
mkdir -p "$root/etc/systemd/system/chainsync@.service.d"
awk '/^# \/etc\/systemd\/system\/chainsync@\.service\.d\/restart\.conf$/ {on = 1; next}
     on && /^```/ {exit}
     on' "$REPO/docs/RESTARTS.md" >"$root/etc/systemd/system/chainsync@.service.d/restart.conf"
grep -q '^Restart=on-failure' "$root/etc/systemd/system/chainsync@.service.d/restart.conf" ||
  fail "no restart drop-in found in docs/RESTARTS.md"
in_ct systemctl daemon-reload
out=$(verify chainsync@A.service)
[ -z "$out" ] || fail "systemd-analyze verify complains about the unit with the drop-in: $out"
env_file A r5 /usr/local/bin/step
env_file B r5 "/usr/local/bin/step hang"
env_file C r5 /usr/local/bin/step
in_ct systemctl start chainsync@A chainsync@B chainsync@C
poll 60 "B's task did not start" eval '[[ "$(steps)" == *"B start"* ]]'
pid=$(prop B MainPID)
[ "$pid" -gt 0 ] || fail "chainsync@B has no main pid"
# The node only: its task is left to see it die, and the task's next run
# would hang (it is not to run again).
in_ct sh -c "kill -KILL $pid"
say "   killed chainsync@B (pid $pid in the container) with SIGKILL"
for n in A B C; do expect_end $n inactive success 0; done
[ "$(prop B NRestarts)" = 1 ] || fail "chainsync@B restarted $(prop B NRestarts) times, want 1"
[ "$(steps)" = "A start A end B start C start C end" ] || fail "after the restart: $(steps)"
say "   B restarted once, took its task as done, C ran: $(steps)"

say "ok"
