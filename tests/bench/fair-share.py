#!/usr/bin/env python3
"""fair-share.py: two users share one model; each user's share of the output
tokens against its weight, under fair-share and under fcfs.

Two users (root and nobody) each keep N generations running back to back
through phasectl for a while; the tokens each receives in the measured
window (after a warm-up) give its share.  With fair-share the shares should
follow the weights given with user-weight; with fcfs they follow who queues
more.  A third run puts one chat of nobody's against a batch of root's and
reports the chat's TTFT.  Prints a Markdown table; needs root (setpriv).

usage: fair-share.py [-b BUILDDIR] [-m MODEL] [-s SECONDS] [-w ROOT:NOBODY]
                     [-n MAX_SEQS] [-c GENERATIONS_PER_USER]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("-b", default=os.environ.get("top_builddir", os.getcwd()))
ap.add_argument("-m", default=os.path.join(os.environ.get(
    "PHASED_SHARED", os.path.join(here, "..", "..", "..", "shared")),
    "models", "stories260K.gguf"))
ap.add_argument("-s", type=float, default=40, help="seconds per run")
ap.add_argument("-w", default="3:1", help="weights root:nobody")
ap.add_argument("-n", type=int, default=8, help="max-seqs of the model")
ap.add_argument("-c", type=int, default=12, help="generations per user")
args = ap.parse_args()
B = os.path.abspath(args.b)
w_root, w_nobody = (int(x) for x in args.w.split(":"))


def start(policy):
    d = tempfile.mkdtemp(prefix="phased-fair-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "phased.sock")
    with open(os.path.join(d, "phased.conf"), "w") as f:
        f.write("plugin-dir %s/policies/.libs\nsocket-group nogroup\n"
                "user-weight root %d\nuser-weight nobody %d\n" %
                (B, w_root, w_nobody))
    log = open(os.path.join(d, "phased.log"), "wb")
    p = subprocess.Popen([os.path.join(B, "phased"), "-d", "-f",
                          os.path.join(d, "phased.conf"), "-s", sock],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    subprocess.run([os.path.join(B, "phasectl"), "-s", sock, "load", "m",
                    args.m, "ctx=512", "max-seqs=%d" % args.n,
                    "policy=%s" % policy], check=True, capture_output=True)
    return p, sock


def loop(sock, user, until, counts, ttfts, key, max_tokens, lock):
    cmd = [os.path.join(B, "phasectl"), "-s", sock, "--json", "generate", "m",
           "--max-tokens", str(max_tokens), "--temp", "1", "Once upon a time"]
    if user != "root":
        cmd = ["setpriv", "--reuid=" + user, "--regid=nogroup",
               "--clear-groups"] + cmd
    while time.monotonic() < until[1]:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        first = None
        for line in p.stdout:
            now = time.monotonic()
            if b'"token_id"' not in line:
                continue
            if first is None:
                first = now - t0
            if until[0] <= now <= until[1]:
                with lock:
                    counts[key] += 1
        p.wait()
        if first is not None and until[0] <= t0:
            with lock:
                ttfts[key].append(first)


def run(policy, n_root, n_nobody, max_root=200, max_nobody=200):
    p, sock = start(policy)
    t = time.monotonic()
    until = (t + 5, t + args.s)
    counts = {"root": 0, "nobody": 0}
    ttfts = {"root": [], "nobody": []}
    lock = threading.Lock()
    th = [threading.Thread(target=loop, args=(sock, "root", until, counts,
                                              ttfts, "root", max_root, lock))
          for _ in range(n_root)]
    th += [threading.Thread(target=loop, args=(sock, "nobody", until, counts,
                                               ttfts, "nobody", max_nobody,
                                               lock))
           for _ in range(n_nobody)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    p.terminate()
    p.wait()
    return counts, ttfts


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


load = open("/proc/loadavg").read().split()[0]
print("Two users, %d generations each kept running, weights root %d : nobody "
      "%d, %.0f s per run (first 5 s not counted), model %s, max-seqs %d; "
      "one-minute load average at start %s.\n" %
      (args.c, w_root, w_nobody, args.s, os.path.basename(args.m), args.n,
       load))
print("| policy | root tokens | nobody tokens | root share | nobody share | "
      "weight shares |")
print("|---|---:|---:|---:|---:|---:|")
for pol in ("fair-share", "fcfs"):
    c, _ = run(pol, args.c, args.c)
    tot = c["root"] + c["nobody"]
    print("| %s | %d | %d | %.3f | %.3f | %.3f / %.3f |" % (
        pol, c["root"], c["nobody"], c["root"] / tot if tot else 0,
        c["nobody"] / tot if tot else 0, w_root / (w_root + w_nobody),
        w_nobody / (w_root + w_nobody)))
    sys.stdout.flush()
print("\nA batch (root, %d generations of 200 tokens) against one chat "
      "(nobody, 16-token answers back to back):\n" % (2 * args.c))
print("| policy | chat answers | chat TTFT median | chat TTFT max | "
      "chat tokens | batch tokens |")
print("|---|---:|---:|---:|---:|---:|")
for pol in ("fair-share", "fcfs"):
    c, tt = run(pol, 2 * args.c, 1, 200, 16)
    v = tt["nobody"]
    print("| %s | %d | %.0f ms | %.0f ms | %d | %d |" % (
        pol, len(v), 1000 * median(v), 1000 * max(v) if v else float("nan"),
        c["nobody"], c["root"]))
    sys.stdout.flush()
