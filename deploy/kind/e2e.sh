#!/usr/bin/env bash
# lace end to end on a kind cluster, on a machine with Docker (not run by CI: no Docker there).
#
#   deploy/kind/e2e.sh [--no-build] [--keep]
#
# Builds the image (deploy/Dockerfile), creates a two-node kind cluster without its default CNI,
# gives each node an underlay (eth1 on a second Docker network, its kernel IPv6 off so only the
# forwarder answers there) and its lace-cni.io/underlay annotation, loads the image, applies
# deploy/kubernetes/overlays/kind, waits for the DaemonSet and the nodes, creates a Network
# bound to every pod, one pod on each node, and pings across the nodes (SRv6 between the
# forwarders). Everything it made is deleted at the end unless --keep.
#
# Needs docker, kind and kubectl (.ci/install-deps puts one in target/deploy-tools/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."

cluster=${LACE_KIND_CLUSTER:-lace-e2e}
underlay=${LACE_KIND_UNDERLAY:-lace-e2e-underlay}
# The tag deploy/kubernetes/base/kustomization.yaml gives the image.
image=lace:0.1.0
build=1
keep=0
for a in "$@"; do
  case $a in
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--no-build] [--keep]" >&2; exit 2 ;;
  esac
done

say() { printf '\n==> %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

PATH="$PWD/target/deploy-tools/bin:$PATH"
for t in docker kind kubectl; do
  command -v "$t" >/dev/null || fail "$t is not installed"
done
k() { kubectl --context "kind-$cluster" "$@"; }

cleanup() {
  local status=$?
  if [ "$status" -ne 0 ] && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
    say "what the lace-node pods said"
    k -n lace-system get pods -o wide || true
    k -n lace-system logs daemonset/lace-node --all-containers --prefix --tail=50 || true
  fi
  if [ "$keep" -eq 1 ]; then
    echo "kept: kind cluster $cluster, Docker network $underlay"
  else
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
    docker network rm "$underlay" >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

if [ "$build" -eq 1 ]; then
  say "building $image"
  docker build -f deploy/Dockerfile -t "$image" .
fi

say "kind cluster $cluster (two nodes, no default CNI)"
kind create cluster --name "$cluster" --config - <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
nodes:
  - role: control-plane
  - role: worker
YAML
mapfile -t nodes < <(kind get nodes --name "$cluster" | sort)
[ "${#nodes[@]}" -eq 2 ] || fail "expected two nodes, got: ${nodes[*]}"

say "the underlay: Docker network $underlay on eth1 of each node"
docker network inspect "$underlay" >/dev/null 2>&1 ||
  docker network create --ipv6 --subnet fd00:100::/64 "$underlay" >/dev/null
i=0
for n in "${nodes[@]}"; do
  i=$((i + 1))
  docker network connect "$underlay" "$n"
  mac=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$underlay\").MacAddress}}" "$n")
  ifname=$(docker exec "$n" ip -o link | awk -v mac="$mac" 'index($0, mac) { sub(/@.*/, "", $2); sub(/:$/, "", $2); print $2 }')
  [ "$ifname" = eth1 ] || fail "$n: the underlay is $ifname, but overlays/kind says uplink-device=eth1"
  # The forwarder is the only IPv6 host on the underlay.
  docker exec "$n" sysctl -qw net.ipv6.conf.eth1.disable_ipv6=1
  docker exec "$n" ethtool -K eth1 tx off tso off gso off gro off >/dev/null 2>&1 ||
    echo "    $n: ethtool missing in the node image; eth1 keeps its offloads"
  k annotate node "$n" --overwrite "lace-cni.io/underlay=fd00:100::1:$i" >/dev/null
  echo "    $n: eth1, underlay fd00:100::1:$i"
done

say "loading $image and applying deploy/kubernetes/overlays/kind"
kind load docker-image "$image" --name "$cluster"
k apply -k deploy/kubernetes/overlays/kind
k -n lace-system rollout status daemonset/lace-node --timeout=300s
k wait --for=condition=Ready nodes --all --timeout=180s
k wait --for=condition=Established crd/networks.lace-cni.io crd/networkbindingpolicies.lace-cni.io --timeout=60s

say "a Network for every pod, one pod on each node"
k apply -f - <<'YAML'
apiVersion: lace-cni.io/v1alpha1
kind: Network
metadata:
  name: e2e
spec:
  type: l3
  ipv4Subnet:
    prefix: 10.50.0.0/16
    hostLocalPrefixLength: 24
---
apiVersion: lace-cni.io/v1alpha1
kind: NetworkBindingPolicy
metadata:
  name: e2e
spec:
  matchKind: [pod]
  rules:
    - network: e2e
YAML
for i in 0 1; do
  k apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: ping-$i
  namespace: default
spec:
  nodeName: ${nodes[$i]}
  tolerations:
    - operator: Exists
  containers:
    - name: ping
      image: busybox:1.36
      command: ["sleep", "3600"]
YAML
done
k wait --for=condition=Ready pod/ping-0 pod/ping-1 --timeout=180s
k get networks -o wide
k get pods -o wide

say "ping across the nodes"
dst=$(k get pod ping-1 -o jsonpath='{.status.podIP}')
[ -n "$dst" ] || fail "ping-1 has no pod IP"
if k exec ping-0 -- ping -c 3 -W 2 "$dst"; then
  echo "PASSED: ping-0 on ${nodes[0]} reaches ping-1 ($dst) on ${nodes[1]}"
else
  fail "ping-0 on ${nodes[0]} does not reach ping-1 ($dst) on ${nodes[1]}"
fi
