#!/usr/bin/env python3
"""Summarises several `supervisorctl bench --json` runs as the Markdown table of
docs/PERFORMANCE.md: per row the median of the runs' medians and their range,
the median p99, the baseline it is compared with, the median ratio and its
range, the target, and in how many runs the target held.

    python3 scripts/bench-table.py RUN.json [RUN.json ...]
    python3 scripts/bench-table.py --write docs/PERFORMANCE.md RUN.json ...

With --write the table replaces what stands between the page's
`<!-- current-table:begin -->` and `<!-- current-table:end -->` lines; the
rest of the page (its history) is left as it is. scripts/perf-table runs the
bench and this in one command.
"""
import json
import statistics
import sys

BEGIN = "<!-- current-table:begin -->"
END = "<!-- current-table:end -->"


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "nanos":
        if v >= 1e6:
            return f"{v / 1e6:.2f} ms"
        if v >= 1e3:
            return f"{v / 1e3:.1f} µs"
        return f"{v:.0f} ns"
    if unit == "mib":
        return f"{v:.1f} MiB"
    if unit == "mib_per_second":
        return f"{v:.0f} MiB/s"
    if unit == "count":
        return f"{v:.0f}"
    if unit == "per_second":
        return f"{v / 1e3:.1f}k/s" if v >= 1e4 else f"{v:.0f}/s"
    return f"{v}"


def target_text(t):
    if not t:
        return "-"
    k = t["kind"]
    if k == "median_at_most_nanos":
        return f"≤ {fmt(t['value'], 'nanos')}"
    if k == "p99_at_most_nanos":
        return f"p99 ≤ {fmt(t['value'], 'nanos')}"
    if k == "at_most_mib":
        return f"≤ {t['value']:.0f} MiB"
    if k == "at_least_per_second":
        return f"≥ {t['value'] / 1e3:.0f}k/s"
    if k == "ratio_at_most":
        return f"≤ {t['factor']}× baseline"
    if k == "at_least_ratio":
        return f"≥ {t['factor']}× baseline"
    if k == "added_at_most_nanos":
        return f"≤ baseline + {fmt(t['value'], 'nanos')}"
    return json.dumps(t)


def status_text(st):
    if isinstance(st, dict):
        st = f"{st.get('state', '?').upper()}: {st.get('reason', '')}"
    return str(st).replace("|", "\\|")


def row_line(rs, names, n):
    first = rs[0]
    unit = first["unit"]
    name = names[first["id"]]
    base = names.get(first.get("baseline") or "", first.get("baseline") or "-")
    meds = [r["median"] for r in rs if r["median"] is not None]
    if not meds:
        return f"| {name} | {status_text(first['status'])} | | {base} | | {target_text(first['target'])} | not measured |"
    rng = f" [{fmt(min(meds), unit)} – {fmt(max(meds), unit)}]" if len(meds) > 1 else ""
    p99s = [r["p99"] for r in rs if r.get("p99") is not None]
    p99 = fmt(statistics.median(p99s), unit) if p99s else "-"
    ratios = [r["ratio"] for r in rs if r.get("ratio") is not None]
    ratio = f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}–{max(ratios):.2f}]" if ratios else "-"
    met = [r["met"] for r in rs]
    mets = "-" if all(x is None for x in met) else f"{sum(1 for x in met if x)} of {n}"
    return f"| {name} | **{fmt(statistics.median(meds), unit)}**{rng} | {p99} | {base} | {ratio} | {target_text(first['target'])} | {mets} |"


def table(runs):
    n = len(runs)
    ids = [r["id"] for r in runs[0]["rows"]]
    names = {r["id"]: r["name"].replace("|", "\\|") for r in runs[0]["rows"]}
    out = [
        f"| measurement | median of the {n} runs [range] | p99 | baseline | ratio [range] | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for id_ in ids:
        rs = [r for run in runs for r in run["rows"] if r["id"] == id_]
        out.append(row_line(rs, names, n))
    out.append("")
    for i, run in enumerate(runs, 1):
        h = run["host"]
        out.append(
            f"- run {i}: {run['date'][:19]}Z, {run['duration_s']:.0f} s, audit sync {run['audit_sync']}, "
            f"load {h['loadavg_start']} → {h['loadavg_end']}"
        )
    return "\n".join(out)


def write_into(page, text):
    src = open(page, encoding="utf-8").read()
    if BEGIN not in src or END not in src:
        sys.exit(f"bench-table: {page} has no {BEGIN} … {END} block to replace")
    head, rest = src.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(page, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv):
    page = None
    if argv[:1] == ["--write"]:
        if len(argv) < 2:
            sys.exit("bench-table: --write needs a page")
        page, argv = argv[1], argv[2:]
    if not argv:
        sys.exit("usage: bench-table.py [--write PAGE] RUN.json [RUN.json ...] (from supervisorctl bench --json)")
    runs = [json.load(open(f, encoding="utf-8")) for f in argv]
    text = table(runs)
    if page:
        write_into(page, text)
    else:
        print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
