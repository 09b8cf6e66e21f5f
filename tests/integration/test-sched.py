#!/usr/bin/env python3
"""Scheduling through the daemon on stories260K: the default chunked-prefill
reports its chunk, forecast, target and the measured iteration in policy
show and the metrics; policy set with the same name reconfigures the
running policy (no swap, state kept), refuses bad values and keeps the old
ones; another name loads afresh.  With and without policy isolation."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

PROMPTS = ["Once upon a time", "The little dog was", "Lily went to the park",
           "Tom had a big red ball " * 12]


def show(d):
    rc, out, err = d.ctl("--json", "policy", "show", "stories")
    return json.loads(out) if rc == 0 else {"error": err}


for isolation in ("yes", "no"):
    tag = "isolation %s" % isolation
    conf = ("plugin-dir %s\npolicy-isolation %s\nmax-waiting 64\n" %
            (PLUGINS, isolation))
    d = Daemon(conf=conf).start()
    rc, out, err = d.ctl("load", "stories", MODEL, "ctx=512", "kv=f32")
    ok(rc == 0, "%s: load stories260K" % tag, err)

    rc, out, err = d.ctl("policy", "set", "stories", "chunked-prefill")
    ok(rc == 0 and "policy set" in out, "%s: chunked-prefill without "
       "parameters" % tag, out + err)
    solo = gen_json(d, "stories", PROMPTS[0], "--max-tokens", "30", "--temp", "0")[1]
    res = gen_many(d, "stories", PROMPTS, ["--max-tokens", "30", "--temp", "0"])
    ok(res[0][0] == solo, "%s: concurrent tokens equal the solo ones" % tag)
    ps = show(d)
    ok("chunk_tokens" in ps and ps["chunk_tokens"] > 0 and "target_ms" in ps
       and "predicted_ms" in ps, "%s: policy show reports chunk, target and "
       "forecast" % tag, ps)
    ok(ps.get("measured_ms", 0) > 0, "%s: and the measured iteration" % tag, ps)
    rc, out, err = d.ctl("policy", "show", "stories")
    ok(rc == 0 and "last iteration: chunk " in out and "measured" in out,
       "%s: text policy show has the last iteration line" % tag, out)
    rc, out, err = d.ctl("metrics")
    ok(rc == 0 and all(n in out for n in (
        "phased_policy_chunk_tokens", "phased_policy_target_seconds",
        "phased_policy_predicted_seconds", "phased_iteration_last_seconds")),
       "%s: the metrics have the policy's report" % tag, out[-400:])

    swaps = ps["swaps"]
    plans = ps["plans"]
    rc, out, err = d.ctl("policy", "set", "stories", "chunked-prefill",
                         "tbt_factor=2", "ttft_ms=5000")
    ok(rc == 0 and "reconfigured" in out, "%s: same name reconfigures" % tag,
       out + err)
    ps = show(d)
    ok(ps["swaps"] == swaps and ps["plans"] >= plans,
       "%s: no swap, the counters go on" % tag, ps)
    ok(ps["params"] == ["tbt_factor=2", "ttft_ms=5000"],
       "%s: policy show has the new params" % tag, ps)
    rc, out, err = d.ctl("policy", "set", "stories", "chunked-prefill",
                         "tbt_factor=0.5")
    ok(rc != 0 and "tbt_factor 0.5 is out of range 1.2..100" in err,
       "%s: a bad value is refused by name and range" % tag, err)
    ok(show(d)["params"] == ["tbt_factor=2", "ttft_ms=5000"],
       "%s: the refused params leave the old ones" % tag)
    rc, out, err = d.ctl("policy", "set", "stories", "chunked-prefill", "x=1")
    ok(rc != 0 and "unknown parameter 'x'" in err,
       "%s: an unknown key is refused" % tag, err)
    res = gen_many(d, "stories", PROMPTS, ["--max-tokens", "30", "--temp", "0"])
    ok(res[0][0] == solo, "%s: reconfigured policy still gives the solo tokens"
       % tag)

    rc, out, err = d.ctl("policy", "set", "stories", "decode-reserved")
    ok(rc == 0 and "policy set" in out and "reconfigured" not in out,
       "%s: another name loads afresh" % tag, out)
    ok(show(d)["swaps"] == swaps + 1, "%s: and counts a swap" % tag)
    rc, out, err = d.ctl("policy", "set", "stories", "fcfs")
    rc, out, err = d.ctl("policy", "set", "stories", "fcfs")
    ok(rc == 0 and "policy set" in out, "%s: a policy without reconfigure "
       "is loaded afresh" % tag, out + err)
    ok(show(d)["swaps"] == swaps + 3, "%s: counted as a swap" % tag)
    ok(d.alive(), "%s: daemon alive" % tag)
    d.stop()
    d.cleanup()

done()
