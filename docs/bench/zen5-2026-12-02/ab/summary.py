import json,glob,statistics as st,sys
d=sys.argv[1]
t={}
for side in ('old','new'):
  for f in sorted(glob.glob(f'{d}/{side}-*.json')):
    j=json.load(open(f))
    for r in j['results']:
      t.setdefault((r['shape'],r['m']),{}).setdefault(side,[]).append((r['time_us'],r['pct_roofline'],r['bandwidth_gbps']))
print("| shape | M | old µs (median, range) | new µs (median, range) | new/old | old %roof | new %roof |")
print("|---|---|---|---|---|---|---|")
rat=[]
for k in sorted(t,key=lambda k:(k[0],k[1])):
  o=[x[0] for x in t[k]['old']]; n=[x[0] for x in t[k]['new']]
  po=[x[1] for x in t[k]['old']]; pn=[x[1] for x in t[k]['new']]
  r=st.median(n)/st.median(o); rat.append(r)
  print(f"| {k[0]} | {k[1]} | {st.median(o):.0f} ({min(o):.0f}-{max(o):.0f}) | {st.median(n):.0f} ({min(n):.0f}-{max(n):.0f}) | {r:.2f} | {min(po):.0f}-{max(po):.0f}% | {min(pn):.0f}-{max(pn):.0f}% |")
import math
print("geometric mean new/old:", round(math.exp(sum(map(math.log,rat))/len(rat)),3))
