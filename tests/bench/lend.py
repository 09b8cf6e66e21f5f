#!/usr/bin/env python3
"""lend.py: what lending idle cores buys one request on a disaggregated
model.  One long prompt, then its answer, alone on a model placed on
groups=prefill:cpu0/decode:cpu1: with lend=off the prompt is prefilled on
cpu0 and the answer decoded on cpu1; with lend=on each phase also runs on
the other, idle, core.  A mixed group on both cores is the reference.
Rounds alternate the settings so a change in the machine's load hits them
alike; the script prints each run and the medians as a Markdown table.

usage: top_builddir=BUILD lend.py [-m MODEL.gguf] [-r ROUNDS] [-w WORDS] [-n TOKENS]
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
from phasedtest import BUILD, SHARED, Daemon  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("-m", default=os.path.join(SHARED, "models", "stories260K.gguf"))
ap.add_argument("-r", type=int, default=3)
ap.add_argument("-w", type=int, default=700, help="words in the prompt")
ap.add_argument("-n", type=int, default=64, help="tokens to generate")
a = ap.parse_args()

WORDS = ("the quick brown fox jumps over a lazy dog while seven small birds "
         "sing about rivers mountains and old stone bridges").split()
base = " ".join(WORDS[i % len(WORDS)] for i in range(a.w))
d = Daemon(conf="plugin-dir %s\n" % os.path.join(BUILD, "policies", ".libs")).start()
for name, opts in (("dis", ["groups=prefill:cpu0/decode:cpu1"]),
                   ("mixed", ["threads=2"])):
    rc, out, err = d.ctl("load", name, a.m, "ctx=2048", *opts, timeout=600)
    if rc != 0:
        sys.exit("lend: load %s: %s" % (name, err))

SETTINGS = (("disaggregated lend=off", "dis", "off"),
            ("disaggregated lend=on", "dis", "on"),
            ("mixed group, 2 threads (fcfs)", "mixed", None))
runs = {s[0]: [] for s in SETTINGS}
for rnd in range(a.r):
    for k, (label, model, lend) in enumerate(SETTINGS):
        # A prompt of its own, so the prefix cache supplies none of it.
        prompt = "run %d: %s" % (rnd * len(SETTINGS) + k, base)
        if lend is not None:
            d.ctl("policy", "set", model, "disaggregated", "lend=" + lend)
        else:
            d.ctl("policy", "set", model, "fcfs")
        rc, out, err = d.ctl("--json", "generate", model, "--max-tokens",
                             str(a.n), "--temp", "0", prompt, timeout=600)
        toks = [json.loads(x) for x in out.splitlines() if '"token_id"' in x]
        t = [x["t_ms"] for x in toks]
        gaps = [b - c for b, c in zip(t[1:], t)]
        c = json.loads(d.ctl("--json", "stats", "dis")[1])["models"][0]["counters"]
        runs[label].append((t[0], statistics.median(gaps), len(toks)))
        print("round %d, %s: TTFT %.0f ms, TBT median %.1f ms, %d tokens, "
              "load %s, dis lend_iterations %s" % (
                  rnd + 1, label, t[0], statistics.median(gaps), len(toks),
                  open("/proc/loadavg").read().split()[0],
                  c.get("lend_iterations")), flush=True)
d.stop()
d.cleanup()
print("\n| placement | rounds | TTFT median (ms) | TBT median (ms) |")
print("|---|---:|---:|---:|")
for label, _, _ in SETTINGS:
    r = runs[label]
    print("| %s | %d | %.0f | %.1f |" % (
        label, len(r), statistics.median(x[0] for x in r),
        statistics.median(x[1] for x in r)))
