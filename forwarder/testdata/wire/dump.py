#!/usr/bin/env python3
"""Prints bytes of one frame of a pcap as a Rust array literal, for the tests in src/wire/.

Usage: dump.py FILE.pcap FRAME [OFFSET [LENGTH]]   (FRAME counts from 1, as tcpdump/tshark do)
"""
import struct
import sys


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    pos = 24
    while pos + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[pos : pos + 16])
        pos += 16
        yield data[pos : pos + incl]
        pos += incl


def main():
    path, frame = sys.argv[1], int(sys.argv[2])
    offset = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    data = list(frames(path))[frame - 1][offset:]
    if len(sys.argv) > 4:
        data = data[: int(sys.argv[4])]
    print(f"// {len(data)} bytes")
    for i in range(0, len(data), 16):
        print("    " + " ".join(f"0x{b:02x}," for b in data[i : i + 16]))


main()
