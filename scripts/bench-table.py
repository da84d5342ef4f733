#!/usr/bin/env python3
"""Summarises several `supervisorctl bench --json` runs as the Markdown table of
docs/PERFORMANCE.md: per row the median of the runs' medians, their range, the
median p99 and ratio, and in how many runs the target held.

    python3 scripts/bench-table.py run1.json run2.json run3.json
"""
import json, statistics, sys
files=sys.argv[1:]
if not files:
    sys.exit("usage: bench-table.py RUN.json [RUN.json ...] (from supervisorctl bench --json)")
runs=[json.load(open(f)) for f in files]
N=len(runs)
def fmt(v, unit):
    if v is None: return '-'
    if unit=='nanos':
        if v>=1e6: return f"{v/1e6:.2f} ms"
        if v>=1e3: return f"{v/1e3:.1f} µs"
        return f"{v:.0f} ns"
    if unit=='mib': return f"{v:.1f} MiB"
    if unit=='per_second':
        return f"{v/1e3:.1f}k/s" if v>=1e4 else f"{v:.0f}/s"
    return f"{v}"
def tgt(t):
    if not t: return '-'
    k=t['kind']; i=t['issue']
    if k=='median_at_most_nanos': return f"≤ {fmt(t['value'],'nanos')} (#{i})"
    if k=='p99_at_most_nanos': return f"p99 ≤ {fmt(t['value'],'nanos')} (#{i})"
    if k=='at_most_mib': return f"≤ {t['value']:.0f} MiB (#{i})"
    if k=='at_least_per_second': return f"≥ {t['value']/1e3:.0f}k/s (#{i})"
    if k=='ratio_at_most': return f"≤ {t['factor']}× baseline (#{i})"
    if k=='added_at_most_nanos': return f"≤ baseline + {fmt(t['value'],'nanos')} (#{i})"
    return json.dumps(t)
ids=[r['id'] for r in runs[0]['rows']]
names={r['id']:r['name'].replace('|','\\|') for r in runs[0]['rows']}
print(f"| measurement | median of the {N} runs [range] | p99 | ratio to baseline [range] | target | met |")
print("|---|---|---|---|---|---|")
for id_ in ids:
    rs=[next(r for r in run['rows'] if r['id']==id_) for run in runs]
    unit=rs[0]['unit']
    meds=[r['median'] for r in rs if r['median'] is not None]
    if not meds:
        st=rs[0]['status']
        if isinstance(st,dict):
            st=f"{st.get('state','?').upper()}: {st.get('reason','')}".replace('|','\\|')
        print(f"| {names[id_]} | {st} | | | | |"); continue
    m=statistics.median(meds)
    p99s=[r['p99'] for r in rs if r.get('p99') is not None]
    p99=fmt(statistics.median(p99s),unit) if p99s else '-'
    ratios=[r['ratio'] for r in rs if r.get('ratio') is not None]
    ratio=f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}–{max(ratios):.2f}]" if ratios else '-'
    met=[r['met'] for r in rs]
    mets='-' if all(x is None for x in met) else f"{sum(1 for x in met if x)} of {N}"
    rng=f" [{fmt(min(meds),unit)} – {fmt(max(meds),unit)}]" if len(meds)>1 else ''
    print(f"| {names[id_]} | **{fmt(m,unit)}**{rng} | {p99} | {ratio} | {tgt(rs[0]['target'])} | {mets} |")
print()
for i,run in enumerate(runs,1):
    h=run['host']
    print(f"- run {i}: {run['date'][:19]}Z, {run['duration_s']:.0f} s, audit sync {run['audit_sync']}, load {h['loadavg_start']} → {h['loadavg_end']}")
