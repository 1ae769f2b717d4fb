import json, gzip, datetime, sys
smi=[]
for ln in gzip.open(sys.argv[2],'rt'):
    f=[x.strip() for x in ln.split(',')]
    try:
        t=datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t,float(f[1].split()[0]),float(f[2].split()[0]),f[3]))
    except Exception: pass
print("# variant, tier TOPS, tier s, exact s in the same kvbench, rel-rms vs exact, and the 50 ms samples above 300 W")
print("# split into the process's two kernel periods (the exact kernel first, then the tier's): (seconds, mean SM MHz, mean W)")
for ln in open(sys.argv[1]):
    v,t0,t1,js=ln.split(' ',3); d=json.loads(js); i=d['inputs'][0]
    hot=[s for s in smi if float(t0)<=s[0]<=float(t1) and s[2]>300]
    per=[]; cur=[]
    for s in hot:
        if cur and s[0]-cur[-1][0]>0.3: per.append(cur); cur=[]
        cur.append(s)
    if cur: per.append(cur)
    desc=[(round(p[-1][0]-p[0][0],2), round(sum(x[1] for x in p)/len(p)), round(sum(x[2] for x in p)/len(p))) for p in per]
    print(f"{v:13s} {i['tops']:6.1f} TOPS {i['seconds']:.3f} s  exact {i['exact_seconds']:.3f} s  rel_rms {i['rel_rms'] if i['rel_rms'] is None else round(i['rel_rms'], 4)}  {desc}")
