# summarize.py SUMMARY_LOG [A/B,...]: median time per point and side over the rounds, and ratios of sides
import re,sys,statistics as st,collections
RATIOS=[tuple(p.split("/")) for p in (sys.argv[2] if len(sys.argv)>2 else "new:vb4/new:v1,new:vb3/new:v1,new:v1/old:v1").split(",")]
d=collections.defaultdict(list)
sides=[]
for l in open(sys.argv[1]):
    m=re.match(r'\s+r(\d) b(\d) (\S+) (\d+x\d+)\s+(\d+)\s+\S+\s+\S+\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+([\d.]+)%',l)
    if m:
        r,b,side,shape,M,us,pct=m.groups()
        d[(b,shape,int(M),side)].append((float(us),float(pct)))
        if side not in sides: sides.append(side)
keys=sorted(set(k[:3] for k in d),key=lambda k:(k[0],k[1],k[2]))
print("bits shape M | "+" | ".join(f"{s} us (%roof)" for s in sides)+" | "+" ".join(f"{a}/{b}" for a,b in RATIOS))
for k in keys:
    row=[]
    med={}
    for s in sides:
        v=d.get(k+(s,),[])
        if v:
            mu=st.median(x[0] for x in v); mp=st.median(x[1] for x in v); med[s]=mu
            row.append(f"{mu:.1f} ({mp:.0f}%) [{min(x[0] for x in v):.1f}-{max(x[0] for x in v):.1f}]")
        else: row.append("-")
    r=lambda a,b: f"{med[a]/med[b]:.2f}" if a in med and b in med else "-"
    print(f"{k[0]} {k[1]} {k[2]} | "+" | ".join(row)+" | "+" ".join(r(a,b) for a,b in RATIOS))
