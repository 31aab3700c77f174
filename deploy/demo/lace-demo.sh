#!/usr/bin/env bash
# The local demo: two lace nodes on this machine, pods as network namespaces.
#
#   node-a (netns lace-demo-a)                      node-b (netns lace-demo-b)
#   ┌───────────────────────────────┐              ┌───────────────────────────────┐
#   │ lace-control   lace-forwarder │   underlay   │ lace-forwarder   lace-control │
#   │   (manifests)    uplink ul-a ─┼── veth pair ─┼─ ul-b uplink                  │
#   │      ▲ lace-cni     │ pods     │  fd00:100::/64                │ pods         │
#   └──────┼──────────────┼─────────┘              └───────────────┼───────────────┘
#      kubelet-style    pod netns (eth0)                     pod netns (eth0)
#      CNI calls
#
# Both controls read the same manifest directory (a copy of deploy/examples) and share one
# allocation state file, as two nodes of one cluster share the API server. Each control keeps
# its node's host interface (lace-host, ADRs 0023 and 0036), through which the node's namespace
# reaches every pod (its own directly, the others over SRv6). Pods are created by
# calling lace-cni exactly as kubelet does (CNI_* environment, network config on stdin).
#
# Usage: deploy/demo/lace-demo.sh [--once] [--debug]
#   --once   run the scenario, print the counters once and clean up (CI runs this)
#   --debug  use the debug build (target/debug) instead of the release build
# Needs root, iproute2, python3 and a build of the workspace. Cleans up on exit or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."

once=0
profile=release
for a in "$@"; do
  case "$a" in
    --once) once=1 ;;
    --debug) profile=debug ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "the demo needs root (network namespaces, DPDK)" >&2; exit 1; }
bin=$PWD/target/$profile
for b in lace-forwarder lace-control lace-cni; do
  [ -x "$bin/$b" ] || { echo "$bin/$b is missing: run cargo build --$profile --workspace first" >&2; exit 1; }
done

work=$(mktemp -d /tmp/lace-demo.XXXXXX)
tag=demo$$
pids=()
pods=()

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
ok() { printf '    \033[32m✓\033[0m %s\n' "$*"; }
bad() { printf '    \033[31m✗\033[0m %s\n' "$*"; }

cleanup() {
  set +e
  trap - EXIT INT TERM HUP
  # The terminal or pipe reading the demo may be gone: never die writing to it.
  trap '' PIPE
  say "cleaning up"
  for p in "${pods[@]}"; do cni DEL "$p" >/dev/null 2>&1; ip netns del "pod-$tag-$p" 2>/dev/null; done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  ip netns del "lace-demo-a" 2>/dev/null
  ip netns del "lace-demo-b" 2>/dev/null
  rm -f /dev/shm/lace-$tag-a.* /dev/shm/lace-$tag-b.*
  rm -rf "$work"
  echo "    removed namespaces, links, processes and files"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

# ---- the two nodes ----------------------------------------------------------------------------
say "two nodes: network namespaces joined by an underlay veth pair"
ip netns del lace-demo-a 2>/dev/null || true
ip netns del lace-demo-b 2>/dev/null || true
ip netns add lace-demo-a
ip netns add lace-demo-b
ip link add ul-a netns lace-demo-a type veth peer name ul-b netns lace-demo-b
declare -A node_ip4=([a]=192.168.200.1 [b]=192.168.200.2) node_ip6=([a]=fd00:200::a [b]=fd00:200::b)
for n in a b; do
  ns=lace-demo-$n
  # The forwarder is the node's IPv6 host on the underlay: no kernel IPv6 on the uplink.
  ip netns exec "$ns" sysctl -qw "net.ipv6.conf.ul-$n.disable_ipv6=1"
  ip -n "$ns" link set lo up
  # The node's own addresses (its InternalIP in deploy/examples/nodes.yaml).
  ip -n "$ns" addr add "${node_ip4[$n]}/32" dev lo
  ip -n "$ns" addr add "${node_ip6[$n]}/128" dev lo nodad
  ip -n "$ns" link set "ul-$n" up
  ip netns exec "$ns" ethtool -K "ul-$n" tx off tso off gso off gro off >/dev/null 2>&1 || true
done
ok "lace-demo-a (uplink ul-a, fd00:100::a) ↔ lace-demo-b (uplink ul-b, fd00:100::b)"

mkdir -p "$work/manifests/.lace"
cp deploy/examples/*.yaml "$work/manifests/"

memory=no-huge
if [ -x "$bin/lace-hugepages" ] && "$bin/lace-hugepages" reserve --mb 600 >/dev/null 2>&1; then
  memory=in-memory
fi

for n in a b; do
  cat >"$work/forwarder-$n.toml" <<EOF
name = "$tag-$n"
tables_dir = "/dev/shm"
[eal]
memory = "$memory"
memory_mb = 256
[uplink]
device = "ul-$n"
address = "fd00:100::$n"
mtu = 1500
[workers]
count = 1
polling = "adaptive"
EOF
  ip netns exec "lace-demo-$n" "$bin/lace-forwarder" run --config "$work/forwarder-$n.toml" \
    >"$work/forwarder-$n.log" 2>&1 &
  pids+=($!)
  ip netns exec "lace-demo-$n" "$bin/lace-control" run --node "node-$n" \
    --manifests "$work/manifests" --state "$work/manifests/.lace/state.json" \
    --socket "$work/control-$n.sock" --tables-dir /dev/shm --tables-name "$tag-$n" \
    --host-interface lace-host >"$work/control-$n.log" 2>&1 &
  pids+=($!)
done
say "lace-forwarder and lace-control on each node (memory: $memory)"
for n in a b; do
  for _ in $(seq 100); do [ -S "$work/control-$n.sock" ] && break; sleep 0.1; done
  [ -S "$work/control-$n.sock" ] || { bad "lace-control on node-$n did not start:"; tail "$work/control-$n.log"; exit 1; }
  ok "node-$n: forwarder $tag-$n, control socket $work/control-$n.sock"
done

# ---- pods through lace-cni, as kubelet would ------------------------------------------------------
node_of() { python3 - "$1" <<'PY'
import sys, re
name = sys.argv[1]
docs = open("deploy/examples/pods.yaml").read().split("\n---")
for d in docs:
    if re.search(r"^\s+name: %s$" % re.escape(name), d, re.M):
        m = re.search(r"nodeName: (\S+)", d)
        ns = re.search(r"namespace: (\S+)", d)
        print(m.group(1)[-1], ns.group(1))
PY
}

cni() { # cni COMMAND POD
  local cmd=$1 pod=$2 n ns
  read -r n ns < <(node_of "$pod")
  printf '{"cniVersion":"1.1.0","name":"lace","type":"lace-cni","controlSocket":"%s"}' \
    "$work/control-$n.sock" |
    ip netns exec "lace-demo-$n" env CNI_COMMAND="$cmd" CNI_CONTAINERID="$tag-$pod" \
      CNI_NETNS="/var/run/netns/pod-$tag-$pod" CNI_IFNAME=eth0 CNI_PATH="$bin" \
      CNI_ARGS="K8S_POD_NAMESPACE=$ns;K8S_POD_NAME=$pod" "$bin/lace-cni"
}

declare -A ip4 ip6
say "pods: lace-cni ADD for each pod of deploy/examples/pods.yaml"
for pod in frontend-1 frontend-2 backend-1 backend-2 tools-1 cart-1 storage-1 storage-2 storage-3; do
  ip netns add "pod-$tag-$pod"
  pods+=("$pod")
  if ! out=$(cni ADD "$pod"); then
    bad "ADD $pod failed: $out"
    exit 1
  fi
  read -r a4 a6 < <(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); a=[i["address"].split("/")[0] for i in r["ips"]]; print(" ".join((a+["-","-"])[:2]))' "$out")
  ip4[$pod]=$a4
  ip6[$pod]=$a6
  read -r n ns < <(node_of "$pod")
  ok "$(printf '%-10s node-%s %-10s %-15s %s' "$pod" "$n" "$ns" "$a4" "$a6")"
done

in_pod() { local p=$1; shift; ip netns exec "pod-$tag-$p" "$@"; }
reach() { # reach FROM TO FAMILY → 0 if ping gets through
  local dst=${ip4[$2]} flag=-4
  [ "$3" = 6 ] && dst=${ip6[$2]} && flag=-6
  in_pod "$1" ping "$flag" -c 2 -i 0.2 -W 1 -q "$dst" >/dev/null 2>&1
}
expect_reach() {
  if reach "$1" "$2" "$3"; then ok "$1 → $2 (IPv$3) reaches"; else bad "$1 → $2 (IPv$3) does not reach"; failures=$((failures+1)); fi
}
expect_isolated() {
  if reach "$1" "$2" "$3"; then bad "$1 → $2 (IPv$3) reaches, but the networks are isolated"; failures=$((failures+1)); else ok "$1 → $2 (IPv$3) is isolated"; fi
}
failures=0

say "same node, same network (frontend-1 → frontend-2 on node-a)"
expect_reach frontend-1 frontend-2 4
expect_reach frontend-1 frontend-2 6
say "across nodes over SRv6, same network (backend-2 on node-a → backend-1 on node-b)"
expect_reach backend-2 backend-1 4
expect_reach backend-2 backend-1 6

say "TCP across nodes: 20 MB backend-2 → backend-1, verified by SHA-256"
in_pod backend-1 python3 - "${ip4[backend-1]}" >"$work/tcp-server.out" 2>&1 <<'PY' &
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(1); s.settimeout(30)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    h.update(b); n += len(b)
print(n, h.hexdigest())
PY
server=$!
sleep 0.5
sent=$(in_pod backend-2 python3 - "${ip4[backend-1]}" <<'PY'
import hashlib, random, socket, sys, time
data = random.Random(7).randbytes(20 << 20)
t = time.time(); c = socket.create_connection((sys.argv[1], 5001), timeout=30); c.sendall(data); c.close()
print(len(data), hashlib.sha256(data).hexdigest(), "%.2f" % (time.time() - t))
PY
) || true
wait "$server" || true
read -r n_sent h_sent secs <<<"$sent"
read -r n_recv h_recv <"$work/tcp-server.out" || true
if [ -n "${h_sent:-}" ] && [ "${h_sent}" = "${h_recv:-}" ]; then
  ok "$n_recv bytes in ${secs}s, SHA-256 matches"
else
  bad "TCP transfer failed (sent: ${sent:-nothing}, received: $(cat "$work/tcp-server.out"))"
  failures=$((failures+1))
fi

say "l2 network storage: one Ethernet domain across nodes (frames in SRv6, End.DT2U/DT2M)"
expect_reach storage-1 storage-3 4
expect_reach storage-1 storage-2 4
expect_reach storage-1 storage-2 6
expect_reach storage-2 storage-3 6

stage_count() { # stage_count NODE STAGE → that stage's packet count on the node's forwarder
  "$bin/lace-forwarder" stats --name "$tag-$1" --tables-dir /dev/shm --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["stages"].get(sys.argv[1], 0))' "$2"
}
say "ARP answered locally: storage-1 resolves storage-2 (on node-b) from node-a's neighbor table"
in_pod storage-1 ip neigh flush dev eth0
before=$(stage_count a arp-reply)
in_pod storage-1 ping -4 -c 1 -W 1 -q "${ip4[storage-2]}" >/dev/null 2>&1 || true
after=$(stage_count a arp-reply)
resolved=$(in_pod storage-1 ip -4 neigh show "${ip4[storage-2]}" dev eth0 | awk '{for (i = 1; i < NF; i++) if ($i == "lladdr") print $(i+1)}')
real=$(in_pod storage-2 cat /sys/class/net/eth0/address)
if [ "$after" -gt "$before" ] && [ -n "$resolved" ] && [ "$resolved" = "$real" ]; then
  ok "node-a's forwarder answered $((after - before)) ARP request(s): ${ip4[storage-2]} is at $resolved, storage-2's own MAC"
else
  bad "ARP for ${ip4[storage-2]}: node-a arp-reply $before → $after, resolved '${resolved}', storage-2's MAC $real"
  failures=$((failures+1))
fi

say "the node's own stack reaches its pods (host interface lace-host), as kubelet's probes do"
host_reach() { # host_reach NODE POD FAMILY → 0 if ping from the node's namespace gets through
  local dst=${ip4[$2]} flag=-4
  [ "$3" = 6 ] && dst=${ip6[$2]} && flag=-6
  ip netns exec "lace-demo-$1" ping "$flag" -c 2 -i 0.2 -W 1 -q "$dst" >/dev/null 2>&1
}
for pod in frontend-1 backend-1 tools-1 storage-1; do
  read -r n _ < <(node_of "$pod")
  for fam in 4 6; do
    if host_reach "$n" "$pod" "$fam"; then ok "node-$n → $pod (IPv$fam) reaches"; else bad "node-$n → $pod (IPv$fam) does not reach"; failures=$((failures+1)); fi
  done
done
# Another node's pods too, over SRv6 (ADR 0036).
for fam in 4 6; do
  if host_reach a backend-1 "$fam"; then ok "node-a → backend-1 on node-b (IPv$fam) reaches over SRv6"; else bad "node-a → backend-1 on node-b (IPv$fam) does not reach"; failures=$((failures+1)); fi
done
# And pods reach every node's address: their own node's, and another node's over SRv6.
for pod in backend-2 backend-1; do
  if in_pod "$pod" ping -4 -c 2 -i 0.2 -W 1 -q "${node_ip4[a]}" >/dev/null 2>&1; then
    ok "$pod → node-a's address ${node_ip4[a]} reaches"
  else
    bad "$pod → node-a's address ${node_ip4[a]} does not reach"
    failures=$((failures+1))
  fi
done

say "isolation: frontend and backend are different networks"
expect_isolated frontend-1 backend-2 4
expect_isolated frontend-1 backend-1 4
expect_isolated cart-1 tools-1 4
expect_isolated storage-1 backend-2 4

say "routing policy: deploy/examples/later/routing.yaml opens frontend ↔ backend"
cp deploy/examples/later/routing.yaml "$work/manifests/"
opened=0
for _ in $(seq 50); do
  if reach frontend-1 backend-1 4; then opened=1; break; fi
  sleep 0.2
done
[ "$opened" = 1 ] || { bad "the routing policy did not open the path"; failures=$((failures+1)); }
expect_reach frontend-1 backend-2 4
expect_reach frontend-1 backend-1 4
expect_reach backend-1 frontend-1 6
expect_isolated cart-1 tools-1 4

show_stats() {
  for n in a b; do
    echo
    echo "--- node-$n ---"
    "$bin/lace-forwarder" stats --name "$tag-$n" --tables-dir /dev/shm || true
  done
}

if [ "$failures" -ne 0 ]; then
  say "$failures check(s) failed; logs:"
  for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done
  show_stats
  exit 1
fi

say "live counters (lace-forwarder stats)"
if [ "$once" = 1 ]; then
  show_stats
  say "demo complete"
  exit 0
fi
echo "    (refreshing every 2 s; Ctrl-C stops the demo and cleans up)"
while true; do
  clear 2>/dev/null || true
  date
  show_stats
  sleep 2
done
