import json,glob,statistics as st,collections
R=collections.defaultdict(lambda: collections.defaultdict(list))
D=collections.defaultdict(list)
def add(path,cfg):
    for r in json.load(open(path))['results']:
        R[(r['k'],r['n'],r['m'])][cfg].append(r['time_us'])
        if r.get('dense_us'): D[(r['k'],r['n'],r['m'])].append(r['dense_us'])
for cfg,f in [('wg128_stream_k','wg128_sk'),('wg128_waves','wg128_waves'),('wg256_stream_k','wg256_sk'),('wg256_waves','wg256_waves')]:
    add(f'docs/bench/device-2026-12-07b/call1/{f}.json',cfg)
for p in glob.glob('docs/bench/device-2026-12-07b/call2/*.json'):
    n=p.split('/')[-1][:-5]; cfg=n.rsplit('_',1)[0]
    add(p,cfg)
cfgs=['wg128_stream_k','wg128_waves','wg256_stream_k','wg256_waves']
print('K x N M | median us: '+' | '.join(cfgs)+' | dense | waves/sk(128) wg256/wg128(sk) best/dense')
agg=collections.defaultdict(list)
for key in sorted(R,key=lambda k:(k[2],k[0]*k[1])):
    med={c:st.median(R[key][c]) for c in cfgs if R[key][c]}
    d=st.median(D[key])
    w=med['wg128_waves']/med['wg128_stream_k']; q=med['wg256_stream_k']/med['wg128_stream_k']; q2=med['wg256_waves']/med['wg128_stream_k']
    b=min(med.values())
    agg[key[2]].append((w,q,q2,d/med['wg128_stream_k'],d/b))
    print(f"{key[0]}x{key[1]} M={key[2]}: "+' | '.join(f"{med[c]:.1f} ({len(R[key][c])})" for c in cfgs)+f" | {d:.1f} | {w:.3f} {q:.3f} {q2:.3f} {d/b:.2f}x")
for m,v in sorted(agg.items()):
    print(m, 'waves/sk %.2f-%.2f'%(min(x[0] for x in v),max(x[0] for x in v)), 'wg256sk/wg128sk %.2f-%.2f'%(min(x[1] for x in v),max(x[1] for x in v)), 'wg256waves/wg128sk %.2f-%.2f'%(min(x[2] for x in v),max(x[2] for x in v)), 'wg128sk x dense %.2f-%.2f'%(min(x[3] for x in v),max(x[3] for x in v)),'best x dense %.2f-%.2f'%(min(x[4] for x in v),max(x[4] for x in v)))
