#!/usr/bin/env python3
"""Seeds corpus/<target>/ with the real packets of ../testdata/wire/*.pcap, cut at the layer
each fuzz target reads, so the fuzzers start from valid packets. run-all.sh calls it."""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
PCAPS = [os.path.join(HERE, "..", "testdata", "wire", n) for n in ("samples.pcap", "samples-vlan.pcap")]


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 24
    while pos + 16 <= len(data):
        incl = struct.unpack("<IIII", data[pos : pos + 16])[2]
        pos += 16
        yield data[pos : pos + incl]
        pos += incl


def save(target, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


for path in PCAPS:
    for frame in frames(path):
        save("ethernet", frame)
        off = 14
        ethertype = frame[12:14]
        if ethertype == b"\x81\x00":
            off, ethertype = 18, frame[16:18]
        l3 = frame[off:]
        if ethertype == b"\x08\x06":
            save("arp", l3)
        elif ethertype == b"\x08\x00":
            save("ipv4", l3)
            save("flow", l3)
            ihl = (l3[0] & 0x0F) * 4
            if l3[9] == 1:
                save("icmpv4", l3[ihl:])
        elif ethertype == b"\x86\xdd":
            save("ipv6", l3)
            save("flow", l3)
            nh, rest = l3[6], l3[40:]
            if nh == 43:
                save("srh", rest)
            if nh == 0:  # Hop-by-Hop, then the upper layer
                nh, rest = rest[0], rest[(rest[1] + 1) * 8 :]
            if nh == 58:
                save("icmpv6", l3[8:40] + rest)
        # The pipeline target: the first byte picks the receiving port (0 = uplink, 1 = pod A).
        for port in range(7):
            save("pipeline", bytes([port]) + frame)


# Frames that take the pipeline's main paths on the fixture node
# (forwarder/src/pipeline/fixture.rs): pod A → pod B, pod A → a remote pod, ARP for the
# gateway, and an SRv6 packet to the node's End.DT46 SID.
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload, ttl=64):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, ttl, proto, 0, bytes(src), bytes(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


def ipv6(src, dst, nh, payload, hlim=64):
    return struct.pack("!IHBB", 6 << 28, len(payload), nh, hlim) + bytes(src) + bytes(dst) + payload


GW_MAC, MAC_A, UPLINK_MAC, PEER_MAC = bytes([2, 0xFE, 0, 0, 0, 7]), bytes([2, 0, 0, 0, 0, 1]), bytes([2, 0xAA, 0, 0, 0, 1]), bytes([2, 0xBB, 0, 0, 0, 2])
A4, B4, REMOTE4, GW4 = [10, 7, 1, 2], [10, 7, 1, 3], [10, 7, 2, 5], [10, 7, 1, 1]
MY_SID = bytes([0xFC, 0, 0, 0, 0, 1, 0, 7] + [0] * 8)
PEER = bytes([0xFD, 0] + [0] * 13 + [0xB])
udp = struct.pack("!HHHH", 1000, 2000, 13, 0) + b"hello"
save("pipeline", bytes([1]) + GW_MAC + MAC_A + b"\x08\x00" + ipv4(A4, B4, 17, udp))
save("pipeline", bytes([1]) + GW_MAC + MAC_A + b"\x08\x00" + ipv4(A4, REMOTE4, 17, udp))
save("pipeline", bytes([1]) + GW_MAC + MAC_A + b"\x08\x00" + ipv4(A4, B4, 17, udp, ttl=1))
arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + MAC_A + bytes(A4) + bytes(6) + bytes(GW4)
save("pipeline", bytes([1]) + b"\xff" * 6 + MAC_A + b"\x08\x06" + arp)
inner = ipv4(REMOTE4, A4, 17, udp)
save("pipeline", bytes([0]) + UPLINK_MAC + PEER_MAC + b"\x86\xdd" + ipv6(PEER, MY_SID, 4, inner))


# Bursts (top bit of the first byte; frames of u16 little-endian length): pod A sends to pod B
# and to a remote pod in one vector (mixed), and four packets to pod B (uniform).
def burst(port, frames):
    out = bytes([0x80 | port])
    for f in frames[:-1]:
        out += struct.pack("<H", len(f)) + f
    return out + frames[-1]


to_b = GW_MAC + MAC_A + b"\x08\x00" + ipv4(A4, B4, 17, udp)
to_remote = GW_MAC + MAC_A + b"\x08\x00" + ipv4(A4, REMOTE4, 17, udp)
save("pipeline", burst(1, [to_b, to_remote, to_b]))
save("pipeline", burst(1, [to_b] * 4))
save("pipeline", burst(1, [to_remote] * 4))


# The learning l2 network (ports 9 and 10 of the fixture are PORTS[9] and PORTS[10]): a VM's
# RARP self-announcement, a gratuitous ARP, a frame from the MAC learned on port 9, a
# broadcast and unknown unicast (flooded within the BUM limit).
MAC_LPOD, MAC_VM = bytes([2, 0, 0, 0, 0, 0x0B]), bytes([0x52, 0x54, 0, 0x12, 0x34, 0x56])
LPOD4, VM4 = [10, 11, 0, 2], [10, 11, 0, 200]
rarp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 3) + MAC_VM + bytes(4) + MAC_VM + bytes(4)
save("rarp", rarp)
save("pipeline", bytes([9]) + b"\xff" * 6 + MAC_VM + b"\x80\x35" + rarp + bytes(18))
garp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + MAC_VM + bytes(VM4) + bytes(6) + bytes(VM4)
save("pipeline", bytes([9]) + b"\xff" * 6 + MAC_VM + b"\x08\x06" + garp)
learned = bytes([2, 0, 0, 0, 0, 0x0C]) + MAC_VM + b"\x08\x00" + ipv4(VM4, [10, 11, 0, 3], 17, udp)
save("pipeline", bytes([9]) + learned)
bcast = b"\xff" * 6 + MAC_LPOD + b"\x08\x00" + ipv4(LPOD4, [255, 255, 255, 255], 17, udp)
save("pipeline", burst(9, [bcast] * 6))
unknown = bytes([2, 0, 0, 0, 0, 0x77]) + MAC_LPOD + b"\x08\x00" + ipv4(LPOD4, [10, 11, 0, 9], 17, udp)
save("pipeline", bytes([9]) + unknown)
