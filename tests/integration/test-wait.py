#!/usr/bin/env python3
"""Wait attribution through the daemon on stories260K: a long prompt that
arrives while two chats decode is named as the cause of their stall, and
every request's shares sum to its end-to-end time."""

import json
import os
import subprocess
import sys
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


d = Daemon(conf="plugin-dir %s\nmodel stories \"%s\" ctx=512\n" % (PLUGINS, MODEL)).start()
ok(wait_ready(d, "stories"), "the model is loaded")
share = {}
finals = []
for name, policy in (("fcfs", ["fcfs"]), ("chunked", ["chunked-prefill", "budget=16"])):
    chats, long = scenario(d, policy)
    ok(long is not None and "request_id" in long and long["wait"]["prefill_ms"] > 0,
       "%s: the long prompt's Done names its id and its own prefill" % name, long)
    sums_ok(long, "%s long prompt" % name)
    finals += [long] + chats
    for i, c in enumerate(chats):
        ok(c is not None and c["output_tokens"] == 400, "%s: chat %d ran to the end" % (name, i), c)
        sums_ok(c, "%s chat %d" % (name, i))
        ok(c["blamed"] and c["blamed"][0]["id"] == long["request_id"]
           and c["wait"]["others_prefill_ms"] > 0,
           "%s: chat %d blames the long prompt (%s) first" % (name, i, long["request_id"]),
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
d.cleanup()
done()
