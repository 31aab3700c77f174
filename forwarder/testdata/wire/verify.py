#!/usr/bin/env python3
"""Checks that every byte array embedded in src/wire/*.rs tests occurs in a frame of the
captures here, and prints which frame and offset. Run from forwarder/: testdata/wire/verify.py"""
import re, glob, struct
def frames(path):
    data=open(path,'rb').read(); pos=24
    while pos+16<=len(data):
        incl=struct.unpack('<IIII',data[pos:pos+16])[2]; pos+=16
        yield data[pos:pos+incl]; pos+=incl
allf=[(p,i+1,f) for p in ['testdata/wire/samples.pcap','testdata/wire/samples-vlan.pcap'] for i,f in enumerate(frames(p))]
for src in sorted(glob.glob('src/wire/*.rs')):
    s=open(src).read()
    for m in re.finditer(r'static (\w+): \[u8; (\d+)\] =\s*\[(.*?)\];', s, re.S):
        name,n,body=m.group(1),int(m.group(2)),m.group(3)
        b=bytes(int(x,16) for x in re.findall(r'0x([0-9a-f]{2})',body))
        assert len(b)==n,(src,name)
        hits=[(p.split('/')[-1],i,f.find(b)) for p,i,f in allf if b in f]
        print(f"{src:28} {name:22} {n:5} -> {hits[:3]}")
