import json,re,sys
issue = """| 4096x6144 | 15 / 12 / 18 | 19 / 15 / 18 | 36 / 22 / 18 | 40 / 29 / 19 | 45 / 42 / 25 | 88 / 149 / 73 | 300 / 593 / 321 |
| 4096x4096 | 10 / 10 / 19 | 14 / 11 / 20 | 31 / 15 / 14 | 26 / 21 / 16 | 28 / 30 / 18 | 60 / 101 / 48 | 193 / 383 / 185 |
| 4096x28672 | 30 / 30 / 64 | 53 / 35 / 65 | 85 / 50 / 66 | 148 / 93 / 111 | 169 / 185 / 99 | 396 / 697 / 377 | 1534 / 2840 / 1472 |
| 14336x4096 | 22 / 22 / 36 | 32 / 26 / 37 | 65 / 37 / 39 | 81 / 64 / 40 | 90 / 91 / 53 | 190 / 332 / 172 | 729 / 1310 / 709 |
| 8192x10240 | 28 / 22 / 54 | 41 / 30 / 55 | 72 / 42 / 52 | 113 / 66 / 51 | 130 / 128 / 72 | 283 / 475 / 260 | 1062 / 1916 / 1040 |
| 8192x8192 | 21 / 18 / 43 | 37 / 28 / 41 | 62 / 41 / 41 | 87 / 53 / 42 | 97 / 103 / 55 | 221 / 385 / 193 | 841 / 1540 / 828 |
| 8192x57344 | 99 / 99 / 233 | 176 / 119 / 235 | 285 / 169 / 295 | 490 / 335 / 411 | 711 / 667 / 427 | 1739 / 2810 / 1484 | 6066 / 11076 / 5813 |
| 28672x8192 | 61 / 51 / 118 | 98 / 82 / 123 | 157 / 122 / 125 | 266 / 166 / 147 | 364 / 356 / 190 | 955 / 1329 / 727 | 3027 / 5327 / 2884 |"""
Ms=[16,32,64,128,256,1024,4096]
peer={}
for line in issue.splitlines():
    cells=[c.strip() for c in line.strip('|').split('|')]
    for m,c in zip(Ms,cells[1:]):
        a,b,cu=[float(x) for x in c.split('/')]
        peer[(cells[0],m)]=(a,b,cu)
d=json.load(open(sys.argv[1]))
print("| K x N | " + " | ".join(f"M={m}" for m in Ms) + " |")
print("|---|" + "---|"*len(Ms))
worst={m:[] for m in Ms}
for shape in [l.split('|')[1].strip() for l in issue.splitlines()]:
    row=[]
    for m in Ms:
        r=[x for x in d['results'] if x['shape']==shape and x['m']==m and x['backend']=='cuda_w4a16']
        if not r: row.append('-'); continue
        r=r[0]; t=r['time_us']; dense=r['dense_us']; marlin=peer[(shape,m)][1]
        best=min(marlin,dense); ratio=best/t
        worst[m].append(ratio)
        row.append(f"{t:.0f} / {marlin:.0f} / {dense:.0f} **{ratio:.2f}x**")
    print(f"| {shape} | " + " | ".join(row) + " |")
print()
print("range per M (faster peer / nibble):", ", ".join(f"M={m} {min(v):.2f}-{max(v):.2f}x" for m,v in worst.items() if v))
