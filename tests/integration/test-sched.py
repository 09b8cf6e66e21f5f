#!/usr/bin/env python3
"""Scheduling through the daemon on stories260K: the default chunked-prefill
reports its chunk, forecast, target and the measured iteration in policy
show and the metrics; policy set with the same name reconfigures the
running policy (no swap, state kept), refuses bad values and keeps the old
ones; another name loads afresh.  With and without policy isolation.  Then
a request's priority, its user (the peer's uid; "network" over TCP) and
that user's weight from user-weight reach the policy's view, from phasectl
and from both HTTP APIs; fair-share and slo serve through the daemon, and
slo's notices reach policy show."""

import http.client
import json
import os
import socket
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


# --- priority, user and weight in the view ---------------------------------
VIEWPLUG = os.path.join(BUILD, "tests", "plugins", "view", ".libs")


def free_port():
    so = socket.socket()
    so.bind(("127.0.0.1", 0))
    port = so.getsockname()[1]
    so.close()
    return port


def post(target, path, body):
    if isinstance(target, int):
        c = http.client.HTTPConnection("127.0.0.1", target, timeout=60)
    else:
        c = UnixHTTP(target)
    c.request("POST", path, body=json.dumps(body).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


def seen(d):
    """(priority, uid, weight) of the newest request, as report-view saw."""
    ps = show(d)
    return (ps.get("chunk_tokens", 0) - 1000, round(ps.get("predicted_ms", -1)),
            round(ps.get("target_ms", -1)))


port = free_port()
d = Daemon(conf="plugin-dir %s\nsocket-group nogroup\nuser-weight nobody 7\n"
           "user-weight 0 3\nuser-weight network 5\nhttp-listen 127.0.0.1:%d\n"
           % (VIEWPLUG, port), dirmode=0o755).start()
rc, out, err = d.ctl("load", "stories", MODEL, "ctx=512", "kv=f32",
                     "policy=report-view")
ok(rc == 0, "load stories260K with the report-view test policy", err)
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "4", "--priority",
                     "-7", "Once upon a time")
ok(rc == 0, "phasectl generate --priority -7", err)
ok(seen(d) == (-7, 0, 3), "the view has priority -7, uid 0 and its "
   "user-weight 3", seen(d))
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "4", "Once upon",
                     user="nobody")
ok(rc == 0, "generate as nobody", err)
ok(seen(d) == (0, 65534, 7), "nobody's request: priority 0, uid 65534, "
   "weight 7", seen(d))
rc, out, err = d.ctl("chat", "stories", "--max-tokens", "4", "--priority", "12",
                     "-m", "hello", user="nobody")
ok(rc == 0 and seen(d) == (12, 65534, 7), "phasectl chat --priority 12 as "
   "nobody", (seen(d), err))
rc, out, err = d.ctl("generate", "stories", "--priority", "1001", "x")
ok(rc != 0 and "priority" in err, "priority 1001 is refused", err)
rc, out, err = d.ctl("generate", "stories", "--priority", "-1001", "x")
ok(rc != 0 and "-1001" in err, "priority -1001 is refused", err)
HS = os.path.join(d.dir, "phased-http.sock")
st, out = post(HS, "/v1/completions", {"model": "stories", "prompt": "Once",
                                       "max_tokens": 3, "priority": -3})
ok(st == 200 and seen(d) == (-3, 0, 3), "OpenAI priority over the HTTP Unix "
   "socket: the peer's uid", (st, out[:200], seen(d)))
st, out = post(port, "/api/generate", {"model": "stories", "prompt": "Once",
                                       "stream": False, "priority": 4,
                                       "options": {"num_predict": 3}})
ok(st == 200 and seen(d) == (4, 4294967294, 5), "Ollama priority over TCP: "
   "the network user and its weight", (st, out[:200], seen(d)))
st, out = post(port, "/v1/completions", {"model": "stories", "prompt": "Once",
                                         "max_tokens": 3, "priority": 5000})
ok(st == 400 and b"priority" in out, "HTTP priority out of range is a 400",
   (st, out[:200]))
ok(d.alive(), "daemon alive")
d.stop()
d.cleanup()

# fair-share through the daemon: two users' concurrent generations give the
# solo tokens (scheduling never changes results).
d = Daemon(conf="plugin-dir %s\nsocket-group nogroup\nuser-weight nobody 3\n"
           % PLUGINS, dirmode=0o755).start()
rc, out, err = d.ctl("load", "stories", MODEL, "ctx=512", "kv=f32",
                     "policy=fair-share", "max-seqs=4")
ok(rc == 0, "load with fair-share", err)
solo = gen_json(d, "stories", PROMPTS[1], "--max-tokens", "24", "--temp", "0")[1]
res = gen_many(d, "stories", PROMPTS * 2, ["--max-tokens", "24", "--temp", "0"])
ok(all(len(t) == 24 for t, f in res) and res[1][0] == solo,
   "fair-share: concurrent generations give the solo tokens")
rc, out, err = d.ctl("policy", "set", "stories", "fair-share", "quantum=8")
ok(rc == 0 and "reconfigured" in out, "fair-share reconfigures in place",
   out + err)

# slo: a TTFT target no prompt can meet is reported, not hidden.  The
# policy flags a prompt whose predicted prefill overruns its deadline, so a
# first generation teaches it the cost per token and a long prompt follows:
# a short one planned within 0.1 ms of its arrival would meet the target.
rc, out, err = d.ctl("policy", "set", "stories", "slo", "ttft_ms=0.1")
ok(rc == 0, "policy set slo ttft_ms=0.1", err)
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "8", PROMPTS[3])
ok(rc == 0, "a first generation under slo", err)
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "1", PROMPTS[3] * 3)
ok(rc == 0, "a one-token generation of a long prompt under slo", err)
ps = show(d)
ok(any("ttft target missed" in n for n in ps.get("notices", [])),
   "policy show says the TTFT target was missed", ps)
rc, out, err = d.ctl("policy", "show", "stories")
ok("notice: ttft target missed" in out, "and in text", out)
res = gen_many(d, "stories", PROMPTS, ["--max-tokens", "24", "--temp", "0"])
ok(res[1][0] == solo, "slo: concurrent generations give the solo tokens")
d.stop()
d.cleanup()

done()
