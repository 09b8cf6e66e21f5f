#!/usr/bin/env python3
"""Lending cores between the device groups of one model (stories260K on
groups=prefill:cpu0/decode:cpu1, disaggregated): each group's loop runs on
its own CPU and the daemon's main thread stays unpinned; with lend=on (the
default) iterations run with the idle group's core, counted in stats and
the metrics, and the greedy tokens equal those of one mixed group; lend=off
set while serving stops the lending, lend=decode and lend=prefill lend one
way; switching mid-stream loses no request and frees every KV block; a bad
value is refused and the old one kept."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)
if (os.cpu_count() or 1) < 2:
    skip_all("one CPU: no second core to place a group on")

PROMPTS = ["Once upon a time", "The little dog was", "Lily went to the park",
           "Tom had a big red ball " * 12]
OPTS = ["--max-tokens", "40", "--temp", "0"]


def lent(d):
    c = json.loads(d.ctl("--json", "stats", "dis")[1])["models"][0]["counters"]
    return int(c.get("lend_iterations", -1)), int(c.get("cores_lent", -1))


def affinities(pid):
    """Cpus_allowed_list of each thread of a process, the main thread (tid
    pid) first, the others in tid order (as numbers: '10001' sorts before
    '9987' as text)."""
    out = []
    tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))
    for t in [pid] + [t for t in tids if t != pid]:
        with open("/proc/%d/task/%s/status" % (pid, t)) as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    out.append(line.split(":", 1)[1].strip())
    return out


d = Daemon(conf="plugin-dir %s\n" % PLUGINS).start()
rc, out, err = d.ctl("load", "mixed", MODEL, "ctx=512", "kv=f32")
ok(rc == 0, "load stories260K on one mixed group", err)
solo = {p: gen_json(d, "mixed", p, *OPTS)[1] for p in PROMPTS}
d.ctl("unload", "mixed")
all_cpus = affinities(d.proc.pid)[0]

rc, out, err = d.ctl("load", "dis", MODEL, "ctx=512", "kv=f32",
                     "groups=prefill:cpu0/decode:cpu1")
ok(rc == 0, "load on a prefill group (cpu0) and a decode group (cpu1)", err)
rc, out, err = d.ctl("policy", "show", "dis")
ok(rc == 0 and "disaggregated" in out, "disaggregated by default", out + err)
ok(lent(d) == (0, 0), "nothing lent before any request", lent(d))

res = gen_many(d, "dis", PROMPTS, OPTS)
bad = [p for p, (t, r) in zip(PROMPTS, res) if t != solo[p]]
ok(not bad, "lend=on: the tokens of one mixed group", bad)
it, cores = lent(d)
ok(it > 0 and cores == it, "lend=on: %d iterations ran with the idle group's "
   "core (cores lent %d)" % (it, cores))
rc, out, err = d.ctl("metrics")
ok(rc == 0 and 'phased_lend_iterations_total{model="dis"} %d' % it in out
   and 'phased_cores_lent_total{model="dis"} %d' % cores in out,
   "metrics count the iterations and the cores lent",
   [x for x in out.splitlines() if "lent" in x or "lend" in x])
aff = affinities(d.proc.pid)
ok(aff[0] == all_cpus, "the daemon's main thread is not pinned (%s)" % aff[0], aff)
ok(aff.count("0") >= 2 and aff.count("1") >= 2,
   "each group's loop and the other's lent thread are pinned", aff)
ok(wait_idle(d, "dis")["kv_blocks_used"] == 0, "lend=on: no KV left in use")

rc, out, err = d.ctl("policy", "set", "dis", "disaggregated", "lend=off")
ok(rc == 0 and "reconfigured" in out, "policy set lend=off while loaded",
   out + err)
before = lent(d)
res = gen_many(d, "dis", PROMPTS, OPTS)
bad = [p for p, (t, r) in zip(PROMPTS, res) if t != solo[p]]
ok(not bad, "lend=off: the same tokens", bad)
ok(lent(d) == before, "lend=off: nothing lent", (before, lent(d)))

rc, out, err = d.ctl("policy", "set", "dis", "disaggregated", "lend=often")
ok(rc != 0 and "lend 'often' is not on, off, prefill or decode" in err,
   "a bad lend value is refused, naming the choices", err)
rc, out, err = d.ctl("policy", "show", "dis")
ok("lend=off" in out, "and lend=off is kept", out)

for way in ("decode", "prefill"):
    d.ctl("policy", "set", "dis", "disaggregated", "lend=" + way)
    before = lent(d)
    toks = gen_json(d, "dis", PROMPTS[3], *OPTS)[1]
    ok(toks == solo[PROMPTS[3]], "lend=%s: the same tokens" % way)
    ok(lent(d)[0] > before[0], "lend=%s: lent (%d iterations)" %
       (way, lent(d)[0] - before[0]))

# Switch lending on and off while requests stream: none is lost.
d.ctl("policy", "set", "dis", "disaggregated")
procs = [subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate", "dis",
                           "--max-tokens", "200", "--temp", "0", p],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
         for p in PROMPTS]
for i in range(20):
    d.ctl("policy", "set", "dis", "disaggregated",
          "lend=" + ("off", "on", "decode", "prefill")[i % 4])
outs = [p.communicate(timeout=300)[0].decode() for p in procs]
finals = [json.loads(o.splitlines()[-1]) for o in outs]
ok(all(f.get("finish_reason") in ("length", "eos", "stop") for f in finals),
   "every request finished while lending changed", finals)
d.ctl("load", "mixed", MODEL, "ctx=512", "kv=f32")
for p, o in zip(PROMPTS, outs):
    want = gen_json(d, "mixed", p, "--max-tokens", "200", "--temp", "0")[1]
    got = [json.loads(x)["token_id"] for x in o.splitlines()
           if "token_id" in x]
    ok(got == want, "switching mid-stream: the tokens of one mixed group "
       "(%s...)" % p[:12])
ok(wait_idle(d, "dis")["kv_blocks_used"] == 0, "no KV left in use on either group")
d.stop()
d.cleanup()
done()
