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
