#!/usr/bin/env python3
"""Wait attribution through the daemon on stories260K: a long prompt that
arrives while two chats decode is named as the cause of their stall, and
every request's shares sum to its end-to-end time; the trace draws each
request's intervals by cause, naming the long prompt on the chats'
others'-prefill ones; stats, top and the metrics carry the share
histograms and the decode window."""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

CAUSES = ("queued", "prefill", "decode", "others_prefill", "preempted",
          "kv_transfer", "client", "scheduling")
LONG = "Once upon a time there was a little girl who loved the park. " * 24


def start(d, prompt, ntok):
    return subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate",
                             "stories", "--max-tokens", str(ntok), "--temp", "0",
                             prompt], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def final(p):
    out, err = p.communicate(timeout=300)
    lines = [json.loads(x) for x in out.decode().splitlines() if x.strip()]
    return lines[-1] if lines and "finish_reason" in lines[-1] else None


def scenario(d, policy):
    """Two chats decoding, then a long prompt; returns (chats, long)."""
    rc, out, err = d.ctl("policy", "set", "stories", *policy)
    ok(rc == 0, "policy set %s" % " ".join(policy), err)
    chats = [start(d, p, 400) for p in ("Lily went to the park", "The cat and the bird")]
    for c in chats:
        c.stdout.readline()      # decoding: its first token is out
    lp = start(d, LONG, 1)
    long = final(lp)
    res = [final(c) for c in chats]
    return res, long


def sums_ok(f, what):
    w = f["wait"]
    total = sum(w[c + "_ms"] for c in CAUSES)
    ok(abs(total - f["e2e_ms"]) <= 0.01 * f["e2e_ms"] + 0.002,
       "%s: the shares sum to e2e (%.3f of %.3f ms)" % (what, total, f["e2e_ms"]), f)


def check_trace(path, chats, long):
    """The chats' rows in the trace: intervals by cause that add up to the
    Done's breakdown, an others'-prefill one blaming the long prompt, and
    an arrow from the long prompt's prefill."""
    with open(path) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    rows = {}
    for e in ev:
        if e.get("pid") == 2 and e["ph"] == "X":
            rows.setdefault(e["tid"], []).append(e)
    lid = long["request_id"]
    lrow = rows.get(lid, [])
    ok(any(e["name"] == "prefill" and e["args"].get("prefill_tokens", 0) > 0 for e in lrow),
       "trace: the long prompt's row has its prefill", [e["name"] for e in lrow])
    ok(any(e.get("pid") == 1 and e["ph"] == "X" and lid in e["args"].get("prefill_requests", [])
           and e["args"]["decode_tokens"] > 0 for e in ev),
       "trace: an iteration names the long prompt among its prefills beside decodes")
    starts = {e["id"]: e for e in ev if e["ph"] == "s" and e.get("cat") == "blame"}
    for i, c in enumerate(chats):
        row = rows.get(c["request_id"], [])
        ok(row and all(e["name"] in CAUSES and e["cat"] == "wait" for e in row),
           "trace: chat %d has a row of wait intervals" % i, len(row))
        stalls = [e for e in row if e["name"] == "others_prefill"
                  and lid in [b["id"] for b in e["args"]["blamed"]]]
        ok(stalls, "trace: chat %d has an others' prefill interval naming the long prompt %d"
           % (i, lid), [e["args"] for e in row if e["name"] == "others_prefill"][:3])
        by = {k: 0.0 for k in CAUSES}
        for e in row:
            by[e["name"]] += e["dur"] / 1e3
        for k in CAUSES:
            want = c["wait"][k + "_ms"]
            ok(abs(by[k] - want) <= 0.01 * want + 0.01,
               "trace: chat %d's %s intervals sum to its Done's %.3f ms" % (i, k, want), by[k])
        arrows = [e for e in ev if e["ph"] == "f" and e.get("tid") == c["request_id"]
                  and e["id"] in starts and starts[e["id"]]["tid"] == lid]
        ok(arrows, "trace: an arrow from the long prompt's prefill ends on chat %d" % i)


def check_top(d, finals):
    """phasectl top's decode window: others' prefill is part of the chats'
    time between tokens, and no more than the Done events gave them."""
    rc, out, err = d.ctl("--json", "top", "--count", "1")
    ok(rc == 0, "top --json --count 1", err)
    m = [x for x in json.loads(out)["models"] if x["model"] == "stories"][0]
    others = sum(f["wait"]["others_prefill_ms"] for f in finals)
    ok(0 < m["decode_others_prefill_ms"] <= others + 0.01,
       "top: others' prefill in decode over the window (%.3f ms, at most the %.3f ms "
       "the requests were given)" % (m["decode_others_prefill_ms"], others), m)
    ok(m["decode_gaps_ms"] > m["decode_others_prefill_ms"], "top: within the time between tokens",
       (m["decode_gaps_ms"], m["decode_others_prefill_ms"]))
    diag("top: decode window %.1f ms between tokens, %.1f ms others' prefill; the chats' "
         "decode %s ms" % (m["decode_gaps_ms"], m["decode_others_prefill_ms"],
                           [f["decode_ms"] for f in finals]))
    want = m["decode_others_prefill_ms"] / m["decode_gaps_ms"]
    ok(abs(m["decode_others_prefill_share"] - want) < 1e-4,
       "top: the share is their ratio (%.4f)" % want, m["decode_others_prefill_share"])
    rc, out, err = d.ctl("top", "--count", "1")
    lines = out.splitlines()
    row = [x.split() for x in lines if " stories " in x]
    # The policy is the last column, the share the one before.
    ok(rc == 0 and lines and "TBT PF%" in lines[0] and row and row[0][-2] ==
       "%.1f%%" % (m["decode_others_prefill_share"] * 100),
       "top: the TBT PF%% column shows it", out)


def bucket_of(share, les):
    """Index of the first upper bound holding share."""
    return next(i for i, le in enumerate(les) if share <= le + 1e-12)


d = Daemon(conf="plugin-dir %s\nmodel stories \"%s\" ctx=512\n" % (PLUGINS, MODEL)).start()
ok(wait_ready(d, "stories"), "the model is loaded")
share = {}
finals = []
for name, policy in (("fcfs", ["fcfs"]), ("chunked", ["chunked-prefill", "budget=16"])):
    if name == "fcfs":
        tdir = tempfile.mkdtemp(prefix="phased-wait-")
        tpath = os.path.join(tdir, "trace.json")
        tp = subprocess.Popen([PHASECTL, "-s", d.sock, "trace", "stories", "--seconds", "12",
                               "-o", tpath], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1)   # the capture has started before the chats arrive
    chats, long = scenario(d, policy)
    if name == "fcfs":
        check_top(d, [long] + chats)
        tout, terr = tp.communicate(timeout=120)
        ok(tp.returncode == 0, "trace written", terr)
        if tp.returncode == 0:
            check_trace(tpath, chats, long)
        os.unlink(tpath) if os.path.exists(tpath) else None
        os.rmdir(tdir)
    ok(long is not None and "request_id" in long and long["wait"]["prefill_ms"] > 0,
       "%s: the long prompt's Done names its id and its own prefill" % name, long)
    sums_ok(long, "%s long prompt" % name)
    finals += [long] + chats
    for i, c in enumerate(chats):
        ok(c is not None and c["output_tokens"] == 400, "%s: chat %d ran to the end" % (name, i), c)
        sums_ok(c, "%s chat %d" % (name, i))
        # Under chunking each chunk costs the chats little, and the other
        # chat's short prefill can weigh as much on a loaded machine: there
        # the long prompt need only be among those blamed.
        ids = [b["id"] for b in c["blamed"]]
        lid = long["request_id"]
        named = ids[:1] == [lid] if name == "fcfs" else lid in ids
        ok(named and c["wait"]["others_prefill_ms"] > 0,
           "%s: chat %d blames the long prompt (%s)%s" % (
               name, i, long["request_id"], " first" if name == "fcfs" else ""),
           (c["blamed"], c["wait"]))
        ok(c["wait"]["decode_ms"] > 0 and c["wait"]["preempted_ms"] == 0
           and c["wait"]["kv_transfer_ms"] == 0 and c["wait"]["client_ms"] == 0,
           "%s: chat %d decoded, was not preempted or moved" % (name, i), c["wait"])
    share[name] = [c["wait"]["others_prefill_ms"] / c["e2e_ms"] for c in chats]
    diag("%s: others' prefill share of the chats' e2e %s, tbt_max %s ms" %
         (name, ["%.3f" % s for s in share[name]], [c["tbt_max_ms"] for c in chats]))

# The per-model sums since start are the finished requests' shares.
rc, out, err = d.ctl("--json", "stats", "stories")
cnt = json.loads(out)["models"][0]["counters"]
e2e = sum(f["e2e_ms"] for f in finals)
total = sum(cnt["wait_%s_ms" % c] for c in CAUSES)
ok(abs(total - e2e) <= 0.01 * e2e, "stats: the wait sums add up to the requests' e2e (%.1f of %.1f ms)"
   % (total, e2e), cnt)
near = abs(cnt["wait_others_prefill_ms"] - sum(f["wait"]["others_prefill_ms"] for f in finals))
ok(near <= 0.01 * cnt["wait_others_prefill_ms"] + 0.01, "stats: others' prefill summed per model", cnt)
rc, out, err = d.ctl("metrics")
line = [x for x in out.splitlines() if x.startswith("phased_request_wait_seconds_total{")
        and 'cause="others_prefill"' in x and 'model="stories"' in x]
ok(len(line) == 1 and abs(float(line[0].split()[-1]) * 1e3 - cnt["wait_others_prefill_ms"]) < 0.01,
   "metrics: phased_request_wait_seconds_total by cause", line)

# Each cause's share of each finished request, bucketed the same way in
# stats and the metrics.
rc, sout, err = d.ctl("--json", "stats", "stories")
ws = json.loads(sout)["models"][0]["wait_share"]
ok(sorted(ws) == sorted(CAUSES), "stats: a share histogram per cause", sorted(ws))
les = [b["le"] for b in ws["others_prefill"]["buckets"]]
ok(les[0] == 0 and les[-1] == 1 and les == sorted(les), "stats: share buckets 0 to 1", les)
for c in ("others_prefill", "decode", "queued"):
    want = [0] * len(les)
    for f in finals:
        want[bucket_of(f["wait"][c + "_ms"] / f["e2e_ms"], les)] += 1
    got = [b["count"] for b in ws[c]["buckets"]]
    ok(ws[c]["count"] == len(finals) and got == want,
       "stats: the %s share histogram holds the %d requests' shares" % (c, len(finals)),
       (got, want))
mean = sum(f["wait"]["others_prefill_ms"] / f["e2e_ms"] for f in finals) / len(finals)
ok(abs(ws["others_prefill"]["mean"] - mean) < 1e-3, "stats: mean others' prefill share %.4f" % mean,
   ws["others_prefill"]["mean"])
prom = {}
for x in out.splitlines():
    if x.startswith("phased_request_wait_share_bucket{") and 'model="stories"' in x:
        lab = x[x.index("{") + 1:x.index("}")]
        kv = dict(p.split("=", 1) for p in lab.split(","))
        prom[(kv["cause"].strip('"'), kv["le"].strip('"'))] = float(x.split()[-1])
for c in ("others_prefill", "decode"):
    cum = 0
    for b in ws[c]["buckets"]:
        cum += b["count"]
        le = "%g" % b["le"]
        ok(prom.get((c, le)) == cum, "metrics: phased_request_wait_share{cause=%s,le=%s} = %d"
           % (c, le, cum), prom.get((c, le)))
    ok(prom.get((c, "+Inf")) == len(finals), "metrics: %s share +Inf bucket" % c)
rc, tout, err = d.ctl("stats", "stories")
ok("e2e share since start" in tout and "others' prefill" in tout, "stats text: the share table and "
   "the decode window", tout)
ok(d.stop() == 0, "phased exits 0 on SIGTERM")
d.cleanup()
done()
