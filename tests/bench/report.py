#!/usr/bin/env python3
"""report.py: turn `phasectl bench --scenario interference` results into a
Markdown table and an SVG token timeline (one row per policy).

usage: report.py --md OUT.md --svg OUT.svg --meta META.json \\
           LABEL:REPORT.json:TIMELINE.json ...

A label given several times is one policy measured in several rounds: the
table pools their samples (chat TBT percentiles over every gap, the mean and
maximum long-prompt TTFT) and the SVG shows the first round.

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


def pct(v, p):
    """Nearest-rank percentile of a sorted list, as phasectl bench computes it."""
    if not v:
        return None
    k = -(-p * len(v) // 100)
    return v[max(int(k) - 1, 0)]


def merge(rounds):
    """Figures of one policy over its rounds, from the timelines."""
    tbt, ttft, gaps = [], [], []
    out_tok = prompt_tok = errors = 0
    dur = 0.0
    for rep, tl in rounds:
        last = {}
        for r in tl["requests"]:
            t = r["tokens_ms"]
            if r["kind"] == "chat":
                tbt.extend(b - a for a, b in zip(t, t[1:]))
                # the stream's gaps, across its turns (see chat_stream_gap)
                k = r["stream"]
                for x in t:
                    if k in last:
                        gaps.append(x - last[k])
                    last[k] = x
                if not t and r["finish"] == "cancelled" and k in last:
                    gaps.append(r["done_ms"] - last[k])
            elif r["kind"] == "long" and t:
                ttft.append(t[0] - r["send_ms"])
        out_tok += rep.get("output_tokens", 0)
        prompt_tok += rep.get("prompt_tokens", 0)
        errors += rep.get("errors", 0)
        dur += rep.get("duration_s", 0)
    tbt.sort()
    ttft.sort()
    gaps.sort()
    return {
        "tbt_p50": pct(tbt, 50), "tbt_p99": pct(tbt, 99),
        "tbt_max": tbt[-1] if tbt else None,
        "gap_max": gaps[-1] if gaps else None,
        "ttft_mean": sum(ttft) / len(ttft) if ttft else None,
        "ttft_max": ttft[-1] if ttft else None, "n_long": len(ttft),
        "out_tps": out_tok / dur if dur else None,
        "prompt_tps": prompt_tok / dur if dur else None, "errors": errors,
        "rounds": len(rounds),
    }


def table(runs):
    """The Markdown comparison table, one row per policy."""
    out = []
    out.append("| policy | rounds | chat TBT p50 (ms) | chat TBT p99 (ms) | chat TBT max (ms) "
               "| max / p50 | max / fcfs p50 | chat stream gap max (ms) "
               "| long TTFT mean (ms) | long TTFT max (ms) "
               "| TTFT vs fcfs | output tok/s | prompt tok/s | errors |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    figs = [(label, merge(rounds)) for label, rounds in runs]
    base = base_tbt = None
    for label, f in figs:
        if label == "fcfs":
            base = f["ttft_mean"]
            base_tbt = f["tbt_p50"]
    for label, f in figs:
        ratio = "%.1fx" % (f["tbt_max"] / f["tbt_p50"]) if f["tbt_p50"] and f["tbt_max"] else "-"
        rel = "%.2fx" % (f["ttft_mean"] / base) if f["ttft_mean"] and base else "-"
        rbase = "%.1fx" % (f["tbt_max"] / base_tbt) if base_tbt and f["tbt_max"] else "-"
        out.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
            label, f["rounds"], fmt(f["tbt_p50"]), fmt(f["tbt_p99"]), fmt(f["tbt_max"]),
            ratio, rbase, fmt(f["gap_max"]), fmt(f["ttft_mean"]), fmt(f["ttft_max"]), rel, fmt(f["out_tps"], 1),
            fmt(f["prompt_tps"], 1), f["errors"]))
    return "\n".join(out) + "\n"


def rounds_table(runs):
    """One row per run, from the --json reports, to show the spread."""
    out = ["| policy | round | chat TBT p50 (ms) | chat TBT max (ms) "
           "| chat stream gap max (ms) | chat TTFT max (ms) | long TTFT (ms) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for label, rounds in runs:
        for n, (rep, _) in enumerate(rounds, 1):
            i = rep.get("interference", {})

            def g(name, key):
                st = i.get(name)
                return st[key] if st and st.get("n") else None
            out.append("| %s | %d | %s | %s | %s | %s | %s |" % (
                label, n, fmt(g("chat_tbt", "p50")), fmt(g("chat_tbt", "max")),
                fmt(g("chat_stream_gap", "max")), fmt(g("chat_ttft", "max")),
                fmt(g("long_ttft", "max"))))
    return "\n".join(out) + "\n"


def svg(runs, title):
    """One SVG: a block per policy (its first round), lanes per chat stream
    and the long prompts."""
    runs = [(label, rounds[0][0], rounds[0][1]) for label, rounds in runs]
    width, left, right = 1100, 170, 20
    lane, gap, head = 16, 22, 40
    tmax = 1.0
    for _, _, tl in runs:
        for r in tl["requests"]:
            tmax = max(tmax, r["done_ms"] / 1e3, r["send_ms"] / 1e3)
    lanes = []
    for _, _, tl in runs:
        n_chat = 1 + max([r["stream"] for r in tl["requests"] if r["kind"] == "chat"] or [0])
        lanes.append((n_chat, max(n_chat, 3)))
    height = head + sum((n + 1) * lane + gap for _, n in lanes) + 30
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
    for (label, rep, tl), (n_chat, n_lanes) in zip(runs, lanes):
        o.append('<text x="4" y="%d" font-weight="bold">%s</text>' % (
            y + lane - 3, html.escape(label)))
        f = merge([(rep, tl)])
        o.append('<text x="4" y="%d" fill="#555">TBT p50 %s, max %s ms</text>' % (
            y + 2 * lane - 3, fmt(f["tbt_p50"]), fmt(f["tbt_max"])))
        o.append('<text x="4" y="%d" fill="#555">stream gap max %s ms</text>' % (
            y + 3 * lane - 3, fmt(f["gap_max"])))
        o.append('<text x="4" y="%d" fill="#555">long TTFT %s ms</text>' % (
            y + 4 * lane - 3, fmt(f["ttft_mean"])))
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
        yy = y + n_lanes * lane
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
        y += (n_lanes + 1) * lane + gap
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
        for lab, rounds in runs:
            if lab == label:
                rounds.append((r, t))
                break
        else:
            runs.append((label, [(r, t)]))
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
        f.write("\nEach run:\n\n")
        f.write(rounds_table(runs))
        f.write(m.get("footer", ""))


if __name__ == "__main__":
    main(sys.argv)
