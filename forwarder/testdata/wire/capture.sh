#!/usr/bin/env bash
# Produces forwarder/testdata/wire/samples.pcap and samples-vlan.pcap: the real packets whose
# bytes are embedded in the tests of forwarder/src/wire/*.rs. Run by hand, as root; the tests
# never run it. Needs iproute2, tcpdump, iputils-ping, arping, ethtool, clang (BPF target) and
# script(1); Debian: apt-get install iproute2 tcpdump iputils-ping arping ethtool clang.
#
# Topology (three network namespaces, two veth pairs, fixed MACs so the bytes are readable):
#
#   lace-wa (host A)                  lace-wr (router R)                  lace-wb (host B)
#   a0 02:00:00:00:0a:01 ---------- r0 02:00:00:00:0a:02
#      192.0.2.1/24                    192.0.2.254/24
#      2001:db8:a::1/64                2001:db8:a::fe/64
#   a1 02:00:00:00:0c:01 ---------- r2 02:00:00:00:0c:02   (A tags VLAN 100 with tc BPF)
#      203.0.113.1/24
#                                    r1 02:00:00:00:0b:02 ------------ b0 02:00:00:00:0b:01
#                                       198.51.100.254/24, mtu 1280       198.51.100.1/24
#                                       2001:db8:b::fe/64                 2001:db8:b::1/64
#
# Everything is captured on a0 inside lace-wa (a1, the VLAN link, into OUT-vlan.pcap). Checksum
# offload is off on every veth so UDP/TCP checksums on the wire are the real ones. The
# namespaces, and with them every link, route and HMAC key, are removed on exit, also on
# failure. Rerunning changes identifiers, checksums and timestamps: the embedded test bytes
# then no longer match (verify.py shows which).
#
# Usage: capture.sh [OUT.pcap]   (default: samples.pcap next to this script)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/samples.pcap}
A=lace-wa R=lace-wr B=lace-wb
tcpdump_pid=

cleanup() {
    for pid in $tcpdump_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    for ns in $A $R $B; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT

for ns in $A $R $B; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
ip link add a0 netns $A type veth peer name r0 netns $R
ip link add r1 netns $R type veth peer name b0 netns $B
ip -n $A link set a0 address 02:00:00:00:0a:01
ip -n $R link set r0 address 02:00:00:00:0a:02
ip -n $R link set r1 address 02:00:00:00:0b:02 mtu 1280
ip -n $B link set b0 address 02:00:00:00:0b:01 mtu 1280
for pair in "$A a0" "$R r0" "$R r1" "$B b0"; do
    set -- $pair
    ip netns exec "$1" ethtool -K "$2" tx off rx off >/dev/null 2>&1 || true
    # No DAD / router solicitation noise, no IPv6 address generation surprises.
    ip netns exec "$1" sysctl -qw "net.ipv6.conf.$2.router_solicitations=0" || true
done

ip -n $A addr add 192.0.2.1/24 dev a0
ip -n $A addr add 2001:db8:a::1/64 dev a0 nodad
ip -n $R addr add 192.0.2.254/24 dev r0
ip -n $R addr add 2001:db8:a::fe/64 dev r0 nodad
ip -n $R addr add 198.51.100.254/24 dev r1
ip -n $R addr add 2001:db8:b::fe/64 dev r1 nodad
ip -n $B addr add 198.51.100.1/24 dev b0
ip -n $B addr add 2001:db8:b::1/64 dev b0 nodad
for pair in "$A a0" "$R r0" "$R r1" "$B b0"; do
    set -- $pair
    ip -n "$1" link set "$2" up
done
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
ip netns exec $R sysctl -qw net.ipv6.conf.all.forwarding=1
ip -n $A route add default via 192.0.2.254
ip -n $A -6 route add default via 2001:db8:a::fe
ip -n $B route add default via 198.51.100.254
ip -n $B -6 route add default via 2001:db8:b::fe

# 802.1Q: this kernel has no 8021q module, so a second link a1 -- r2 gets a tc egress BPF program
# (vlan_push.c, next to this script) that pushes VLAN tag 100 on every frame A sends there. R
# cannot untag, so only A's side is captured (ARP request, and an echo request to a static
# neighbor).
ip link add a1 netns $A type veth peer name r2 netns $R
ip -n $A link set a1 address 02:00:00:00:0c:01
ip -n $R link set r2 address 02:00:00:00:0c:02
ip netns exec $A ethtool -K a1 tx off rx off >/dev/null 2>&1 || true
ip -n $A addr add 203.0.113.1/24 dev a1
ip -n $A link set a1 up
ip -n $R link set r2 up
vlan=0
bpf_obj=$(mktemp --suffix=.o)
if clang -O2 -target bpf -c "$here/vlan_push.c" -o "$bpf_obj" \
    && tc -n $A qdisc add dev a1 clsact \
    && tc -n $A filter add dev a1 egress bpf da obj "$bpf_obj" sec tc; then
    vlan=1
fi
rm -f "$bpf_obj"

# SRv6 encapsulation in A (the kernel builds the SRH): 2001:db8:5::/64 goes in an outer IPv6
# header to fc00::1 with an SRH listing fc00::1, fc00::2. R has no route to fc00::/16 and answers
# with ICMPv6 Destination Unreachable. The second route adds an HMAC TLV (key 7) to the SRH.
ip -n $A -6 route add fc00::/16 via 2001:db8:a::fe dev a0
ip -n $A -6 route add 2001:db8:5::/64 encap seg6 mode encap segs fc00::1,fc00::2 dev a0
ip netns exec $A sysctl -qw net.ipv6.conf.a0.seg6_enabled=1
# Outer flow label = hash of the inner flow (what lace does too).
ip netns exec $A sysctl -qw net.ipv6.seg6_flowlabel=1
hmac=0
# `ip sr hmac set` reads the secret from a terminal: script(1) gives it one.
# getpass() flushes pending input, hence the pause before the secret.
if (sleep 1; printf 'lace-wire-samples\n') \
    | timeout 5 script -qc "ip netns exec $A ip sr hmac set 7 sha256" /dev/null >/dev/null 2>&1 \
    && ip -n $A sr hmac show | grep -q 'hmac 7' \
    && ip -n $A -6 route add 2001:db8:6::/64 encap seg6 mode encap segs fc00::3,fc00::4 hmac 7 dev a0 2>/dev/null; then
    hmac=1
fi

sleep 1
ip netns exec $A tcpdump -q -U -i a0 -w "$out" 2>/dev/null &
tcpdump_pid=$!
ip netns exec $A tcpdump -q -U -i a1 -w "${out%.pcap}-vlan.pcap" 2>/dev/null &
tcpdump_pid="$tcpdump_pid $!"
sleep 1

run() { echo "+ $*" >&2; ip netns exec $A "$@" >/dev/null 2>&1 || true; sleep 0.3; }

# IPv4
run arping -c 1 -I a0 192.0.2.254                 # ARP request (broadcast) + reply
run ping -c 1 -W 1 192.0.2.254                     # ICMPv4 echo request + reply
run ping -c 1 -W 1 -R 192.0.2.254                  # IPv4 with options (record route)
run ping -c 1 -W 1 -t 1 198.51.100.1               # ICMPv4 time exceeded from R
run ping -c 1 -W 1 -M do -s 1400 198.51.100.1      # ICMPv4 fragmentation needed, mtu 1280
run ping -c 1 -W 1 -s 1480 192.0.2.254             # IPv4 fragments (the second one short)
run bash -c 'echo lace >/dev/udp/198.51.100.1/33434' # UDP + ICMPv4 port unreachable from B
run timeout 2 bash -c 'exec 3<>/dev/tcp/198.51.100.1/80' # TCP SYN (+ RST from B)
if [[ $vlan == 1 ]]; then
    run arping -c 1 -w 1 -I a1 203.0.113.254       # ARP request in VLAN 100
    ip -n $A neigh add 203.0.113.254 lladdr 02:00:00:00:0c:02 dev a1
    run ping -c 1 -W 1 203.0.113.254               # ICMPv4 echo request in VLAN 100
fi
# IPv6
run ping -6 -c 1 -W 1 2001:db8:a::fe               # NDP NS/NA + ICMPv6 echo request + reply
run ping -6 -c 1 -W 1 -t 1 2001:db8:b::1           # ICMPv6 time exceeded from R
run ping -6 -c 1 -W 1 -M do -s 1400 2001:db8:b::1  # ICMPv6 packet too big, mtu 1280
run bash -c 'echo lace >/dev/udp/2001:db8:b::1/33434' # UDP + ICMPv6 port unreachable from B
run ping -6 -c 1 -W 1 2001:db8:5::1                # SRv6 encap with SRH + ICMPv6 unreachable
if [[ $hmac == 1 ]]; then
    run ping -6 -c 1 -W 1 2001:db8:6::1            # SRv6 encap with SRH + HMAC TLV
fi

sleep 1
echo "wrote $out (hmac TLV sample: $hmac, vlan sample: $vlan)" >&2
