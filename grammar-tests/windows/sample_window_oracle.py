#!/usr/bin/env python3
"""The expected output of sample_window.slt's seeded queries, computed from the documented
semantics without Weir: every element's priority is the 64-bit hash (docs/sql.md, "De-
duplication and sampling"; crates/weir-exec/src/route.rs) of the seed, timestamp and
occurrence (8 bytes each, little-endian) followed by the row's Arrow row encoding (per BIGINT
column: 0x01, then the value with its sign bit flipped, 8 bytes big-endian); each window
[b - range, b), b = k*slide + offset, is sampled from scratch (its N smallest priorities) and
the changes between consecutive windows' samples are printed at b - 1.

With RANGE 0, the whole stream is sampled instead ([SAMPLE N ROWS SEED s], sample_seeded.slt)
and each element is printed at the instant it enters the sample (ISTREAM: "@t v t").

Usage: sample_window_oracle.py FILE.csv RANGE SLIDE OFFSET N SEED   (FILE: header, then v,t)
"""
import csv, struct, sys
M=(1<<64)-1
K=0x9E3779B97F4A7C15
def mix(z):
    z=((z^(z>>30))*0xBF58476D1CE4E5B9)&M
    z=((z^(z>>27))*0x94D049BB133111EB)&M
    return z^(z>>31)
def hash_bytes(b):
    h=mix(len(b)^K)
    for i in range(0,len(b),8):
        c=b[i:i+8].ljust(8,b'\0')
        h=mix(h^struct.unpack('<Q',c)[0])
    return h
def value_hash(b): return mix(hash_bytes(b)^0x6A09E667F3BCC908)
def enc(v): return b'\x01'+struct.pack('>Q',(v+(1<<63))&M)
def prio(seed,t,row,occ): return value_hash(struct.pack('<q',seed)+struct.pack('<q',t)+struct.pack('<Q',occ)+row)
T,S,O,N,SEED=[int(x) for x in sys.argv[2:7]]
els=[]
occ={}
rd=csv.reader(open(sys.argv[1])); next(rd)
for v,t in rd:
    v,t=int(v),int(t)
    row=enc(v)+enc(t)
    n=occ.get((t,row),0); occ[(t,row)]=n+1
    els.append(((prio(SEED,t,row,n),t,row,n),(v,t)))
maxt=max(e[0][1] for e in els)
if T==0:
    sample=set()
    for tau in range(maxt+1):
        now=sorted([e for e in els if e[0][1]<=tau])[:N]
        for e in now:
            if e[0] not in sample: print("@%d %d %d"%(tau,e[1][0],e[1][1]))
        sample=set(e[0] for e in now)
    sys.exit(0)
prev=[]
out=[]
tau=0
while tau<=maxt+T+S:
    end=tau+1
    if (end-O)%S==0:
        w=sorted([e for e in els if end-T<=e[0][1]<end])[:N]
        pk=set(e[0] for e in prev); wk=set(e[0] for e in w)
        for e in prev:
            if e[0] not in wk: out.append("@%d -1 %d %d"%(tau,e[1][0],e[1][1]))
        for e in w:
            if e[0] not in pk: out.append("@%d +1 %d %d"%(tau,e[1][0],e[1][1]))
        prev=w
    tau+=1
for l in sorted(out): print(l)
