import re,sys,statistics as st,collections
d=collections.defaultdict(list)
sides=[]
for l in open(sys.argv[1]):
    m=re.match(r'\s+r(\d) b(\d) (\S+) (\d+x\d+)\s+(\d+)\s+\S+\s+\S+\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+([\d.]+)%',l)
    if m:
        r,b,side,shape,M,us,pct=m.groups()
        d[(b,shape,int(M),side)].append((float(us),float(pct)))
        if side not in sides: sides.append(side)
keys=sorted(set(k[:3] for k in d),key=lambda k:(k[0],k[1],k[2]))
print("bits shape M | "+" | ".join(f"{s} us (%roof)" for s in sides)+" | vb4/newv1 vb3/newv1 newv1/oldv1")
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
    print(f"{k[0]} {k[1]} {k[2]} | "+" | ".join(row)+f" | {r('new:vb4','new:v1')} {r('new:vb3','new:v1')} {r('new:v1','old:v1')}")
