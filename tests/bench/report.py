#!/usr/bin/env python3
"""report.py: turn `phasectl bench --scenario interference` results into a
Markdown table and an SVG token timeline (one row per policy).

usage: report.py --md OUT.md --svg OUT.svg --meta META.json \\
           LABEL:REPORT.json:TIMELINE.json ...

META.json holds the free-form header lines (machine, model, command, date,
load).  Each REPORT.json is the --json output of phasectl bench; each
TIMELINE.json is its --timeline file.  The SVG draws, per policy, one lane
per chat stream with a tick per token, and a lane for the long prompts with
a bar from arrival to first token."""

import html
import json
import sys


def fmt(v, nd=0):
    """A number for the table, or a dash."""
    if v is None:
        return "-"
    return ("%%.%df" % nd) % v


def lat(rep, group, name, key):
    """One latency figure from a report, or None when the sample is empty."""
    s = rep.get(group, {}).get(name)
    if not s or s.get("n", 0) == 0:
        return None
    return s[key]


def table(runs):
    """The Markdown comparison table."""
    out = []
    out.append("| policy | chat TBT p50 (ms) | chat TBT p99 (ms) | chat TBT max (ms) "
               "| max / p50 | long TTFT mean (ms) | long TTFT max (ms) | vs fcfs "
               "| output tok/s | prompt tok/s | errors |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for label, rep, _ in runs:
        if label.startswith("fcfs"):
            base = lat(rep, "interference", "long_ttft", "mean")
    for label, rep, _ in runs:
        p50 = lat(rep, "interference", "chat_tbt", "p50")
        mx = lat(rep, "interference", "chat_tbt", "max")
        lt = lat(rep, "interference", "long_ttft", "mean")
        ratio = "%.1fx" % (mx / p50) if p50 and mx else "-"
        rel = "%.2fx" % (lt / base) if lt and base else "-"
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
            label, fmt(p50), fmt(lat(rep, "interference", "chat_tbt", "p99")),
            fmt(mx), ratio, fmt(lt), fmt(lat(rep, "interference", "long_ttft", "max")),
            rel, fmt(rep.get("output_tps"), 1), fmt(rep.get("prompt_tps"), 1),
            rep.get("errors", 0)))
    return "\n".join(out) + "\n"


def svg(runs, title):
    """One SVG: a block per policy, lanes per chat stream and the long prompts."""
    width, left, right = 1100, 170, 20
    lane, gap, head = 16, 22, 40
    tmax = 1.0
    for _, _, tl in runs:
        for r in tl["requests"]:
            tmax = max(tmax, r["done_ms"] / 1e3, r["send_ms"] / 1e3)
    lanes = []
    for _, _, tl in runs:
        n_chat = 1 + max([r["stream"] for r in tl["requests"] if r["kind"] == "chat"] or [0])
        lanes.append(n_chat)
    height = head + sum((n + 1) * lane + gap for n in lanes) + 30
    scale = (width - left - right) / tmax

    def x(t_ms):
        return left + t_ms / 1e3 * scale

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="11">' % (width, height),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="16" font-size="13">%s</text>' % (left, html.escape(title)),
         '<text x="%d" y="31" fill="#555">tick: one token of a chat stream; '
         'grey bar: long prompt from arrival (triangle) to first token (dot)</text>' % left]
    y = head
    for (label, rep, tl), n_chat in zip(runs, lanes):
        o.append('<text x="4" y="%d" font-weight="bold">%s</text>' % (
            y + lane - 3, html.escape(label)))
        for k in range(n_chat):
            yy = y + k * lane
            o.append('<text x="%d" y="%d" fill="#555">chat %d</text>' % (
                left - 50, yy + lane - 4, k))
            o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>' % (
                left, yy + lane / 2, width - right, yy + lane / 2))
            ticks = []
            for r in tl["requests"]:
                if r["kind"] == "chat" and r["stream"] == k:
                    ticks.extend(r["tokens_ms"])
            path = "".join("M%.1f %.1fv%d" % (x(t), yy + 2, lane - 4) for t in ticks)
            if path:
                o.append('<path d="%s" stroke="#1f5fbf" stroke-width="0.8"/>' % path)
        yy = y + n_chat * lane
        o.append('<text x="%d" y="%d" fill="#555">long</text>' % (left - 50, yy + lane - 4))
        for r in tl["requests"]:
            if r["kind"] != "long":
                continue
            a = x(r["send_ms"])
            f = x(r["tokens_ms"][0]) if r["tokens_ms"] else x(r["done_ms"])
            o.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#ccc"/>' % (
                a, yy + 4, max(f - a, 0.5), lane - 8))
            o.append('<path d="M%.1f %.1fl-4 -6h8z" fill="#c03030"/>' % (a, yy + 6))
            o.append('<circle cx="%.1f" cy="%.1f" r="3" fill="#208020"/>' % (f, yy + lane / 2))
            o.append('<text x="%.1f" y="%.1f" fill="#333">%.1f s</text>' % (
                f + 4, yy + lane - 4, (r["tokens_ms"][0] - r["send_ms"]) / 1e3
                if r["tokens_ms"] else 0))
        y += (n_chat + 1) * lane + gap
    # time axis
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>' % (
        left, y - gap + 4, width - right, y - gap + 4))
    step = 1
    while tmax / step > 20:
        step *= 2 if str(step)[0] in "15" else 2.5
    t = 0.0
    while t <= tmax:
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>' % (
            x(t * 1e3), y - gap + 4, x(t * 1e3), y - gap + 8))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (
            x(t * 1e3), y - gap + 19, t))
        t += step
    o.append('<text x="%d" y="%d" text-anchor="end">time (s)</text>' % (
        width - right, y - gap + 19))
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main(argv):
    md = svgf = meta = None
    runs = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("--md", "--svg", "--meta") and i + 1 < len(argv):
            if a == "--md":
                md = argv[i + 1]
            elif a == "--svg":
                svgf = argv[i + 1]
            else:
                meta = argv[i + 1]
            i += 2
            continue
        label, rep, tl = a.split(":", 2)
        with open(rep) as f:
            r = json.load(f)
        with open(tl) as f:
            t = json.load(f)
        runs.append((label, r, t))
        i += 1
    if not runs or md is None or svgf is None:
        sys.exit("usage: report.py --md OUT --svg OUT [--meta META.json] "
                 "LABEL:REPORT:TIMELINE ...")
    m = {}
    if meta:
        with open(meta) as f:
            m = json.load(f)
    with open(svgf, "w") as f:
        f.write(svg(runs, m.get("title", "chat token timelines under a long prompt")))
    with open(md, "w") as f:
        f.write(m.get("header", ""))
        f.write(table(runs))
        f.write(m.get("footer", ""))


if __name__ == "__main__":
    main(sys.argv)
