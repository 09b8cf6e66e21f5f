#!/usr/bin/env python3
"""wait-breakdown.py: where the chats' time goes in the interference
scenario, per policy.  Two chats decode while a long prompt arrives; the
script prints, per policy, the mean over rounds and chats of each cause of
the wait breakdown (phasectl --json generate's "wait"), a Markdown table,
and with --svg writes the same means as a stacked-bar chart (plain SVG).

The policies are fcfs, decode-reserved, chunked-prefill with budgets 16
and 64 on one mixed group (all cores, or --mixed GROUPS, e.g. mixed:cpu0
for one pinned core), and disaggregated on a second copy of the model
placed on a prefill group (cpu0) and a decode group (cpu1).

usage: top_builddir=BUILD wait-breakdown.py [--svg FILE] [--mixed GROUPS] [ROUNDS]
       (stories260K.gguf; ROUNDS defaults to 3)
"""

import json
import os
import subprocess
import sys
import time
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
from phasedtest import BUILD, PHASECTL, SHARED, Daemon, wait_ready  # noqa: E402

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
CAUSES = ("queued", "prefill", "decode", "others_prefill", "preempted",
          "kv_transfer", "client", "scheduling")
# (row name, model, policy and parameters)
POLICIES = (("fcfs", "stories", ["fcfs"]),
            ("decode-reserved", "stories", ["decode-reserved"]),
            ("chunked-prefill budget=16", "stories", ["chunked-prefill", "budget=16"]),
            ("chunked-prefill budget=64", "stories", ["chunked-prefill", "budget=64"]),
            ("disaggregated (prefill:cpu0/decode:cpu1)", "stories-dis", ["disaggregated"]))
LONG = "Once upon a time there was a little girl who loved the park. " * 24
COLORS = {"queued": "#9e9e9e", "prefill": "#1f77b4", "decode": "#2ca02c",
          "others_prefill": "#d62728", "preempted": "#ff7f0e",
          "kv_transfer": "#9467bd", "client": "#8c564b", "scheduling": "#bcbd22"}


def start(d, model, prompt, ntok):
    return subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate",
                             model, "--max-tokens", str(ntok), "--temp", "0",
                             prompt], stdout=subprocess.PIPE)


def final(p):
    out, _ = p.communicate(timeout=300)
    return json.loads(out.decode().splitlines()[-1])


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def svg_chart(rows, title, subtitles):
    """A horizontal stacked bar per policy: the chats' mean e2e by cause."""
    left, right, bar, gap = 300, 40, 26, 14
    top = 54 + 18 * len(subtitles)
    width = 1000
    plot = width - left - right
    longest = max(sum(r["means"]) for r in rows) or 1.0
    # A round axis end: 1, 2 or 5 times a power of ten.
    mag = 10 ** len(str(int(longest))) / 10
    axis = next(m * mag for m in (1, 2, 5, 10) if m * mag >= longest)
    height = top + len(rows) * (bar + gap) + 90
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>'
           % (10, escape(title)),
           ] + ['<text x="10" y="%d" fill="#444">%s</text>' % (42 + 18 * i, escape(t))
                for i, t in enumerate(subtitles)]
    for k in range(6):
        v = axis * k / 5
        x = left + plot * v / axis
        y1 = top + len(rows) * (bar + gap)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>'
                   % (x, top - 6, x, y1))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>'
                   % (x, y1 + 14, v))
    out.append('<text x="%d" y="%d" text-anchor="middle">mean chat end-to-end '
               'time (ms)</text>' % (left + plot / 2, top + len(rows) * (bar + gap) + 32))
    for i, r in enumerate(rows):
        y = top + i * (bar + gap)
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>'
                   % (left - 8, y + bar / 2 + 4, escape(r["name"])))
        x = left
        for c, v in zip(CAUSES, r["means"]):
            w = plot * v / axis
            if w <= 0:
                continue
            out.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s">'
                       '<title>%s: %s %.1f ms</title></rect>'
                       % (x, y, w, bar, COLORS[c], escape(r["name"]), c, v))
            x += w
        share = r["means"][CAUSES.index("others_prefill")] / (sum(r["means"]) or 1)
        out.append('<text x="%.1f" y="%d" fill="#d62728">%.1f%%</text>'
                   % (x + 4, y + bar / 2 + 4, share * 100))
    ly = height - 26
    lx = 10
    for c in CAUSES:
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                   % (lx, ly - 10, COLORS[c]))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 16, ly, c))
        lx += 16 + 7 * len(c) + 18
    out.append('<text x="%d" y="%d" fill="#d62728">%% = others_prefill share '
               'of e2e</text>' % (lx, ly))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    args = sys.argv[1:]
    svg = mixed = None
    while len(args) >= 2 and args[0] in ("--svg", "--mixed"):
        if args[0] == "--svg":
            svg = args[1]
        else:
            mixed = args[1]
        args = args[2:]
    rounds = int(args[0]) if args else 3
    load0 = loadavg()
    d = Daemon(conf="plugin-dir %s\nmodel stories \"%s\" ctx=512%s\n" % (
        PLUGINS, MODEL, " groups=" + mixed if mixed else "")).start()
    wait_ready(d, "stories")
    rc, _, err = d.ctl("load", "stories-dis", MODEL, "ctx=512",
                       "groups=prefill:cpu0/decode:cpu1")
    if rc != 0:
        sys.exit("load stories-dis: %s" % err)
    wait_ready(d, "stories-dis")
    acc = {name: [] for name, _, _ in POLICIES}
    blamed_long = {name: 0 for name, _, _ in POLICIES}
    for _ in range(rounds):
        for name, model, pol in POLICIES:
            d.ctl("policy", "set", model, *pol)
            chats = [start(d, model, p, 400) for p in ("Lily went to the park",
                                                       "The cat and the bird")]
            for c in chats:
                c.stdout.readline()
            long = final(start(d, model, LONG, 1))
            for c in chats:
                f = final(c)
                acc[name].append(f)
                if f["blamed"] and f["blamed"][0]["id"] == long["request_id"]:
                    blamed_long[name] += 1
    d.cleanup()
    load1 = loadavg()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print("Date: %s; command: top_builddir=%s %s; model stories260K.gguf, "
          "ctx 512, 2 chats x 400 tokens, one %d-byte prompt arriving while they decode; "
          "the mixed group on %s; load average before %s, after %s" % (
              when, BUILD, " ".join(sys.argv), len(LONG),
              mixed or "all cores", load0, load1))
    print()
    print("| policy | e2e ms | " + " | ".join(c + " ms" for c in CAUSES) +
          " | others_prefill share | tbt_max ms | long prompt blamed first |")
    print("|---" * (len(CAUSES) + 5) + "|")
    rows = []
    for name, _, _ in POLICIES:
        fs = acc[name]
        n = len(fs)
        e2e = sum(f["e2e_ms"] for f in fs) / n
        row = [sum(f["wait"][c + "_ms"] for f in fs) / n for c in CAUSES]
        rows.append({"name": name, "means": row})
        print("| %s | %.1f | %s | %.3f | %.1f | %d of %d |" % (
            name, e2e, " | ".join("%.1f" % v for v in row),
            row[CAUSES.index("others_prefill")] / e2e,
            sum(f["tbt_max_ms"] for f in fs) / n, blamed_long[name], n))
    if svg is not None:
        with open(svg, "w") as f:
            f.write(svg_chart(rows, "Who made the chats wait: wait breakdown per policy", [
                "%s; stories260K.gguf, 2 chats x 400 tokens while a ~340-token prompt "
                "arrives; %d rounds" % (when, rounds),
                "mixed group: %s; load average (1, 5, 15 min) before %s, after %s "
                "(2 shared cores)" % (mixed or "all cores", load0, load1)]))


main()
