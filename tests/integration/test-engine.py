#!/usr/bin/env python3
"""End-to-end tests of the engine on stories260K through the daemon: golden
tokens, batch invariance under every policy, live policy swaps, client
disconnects, preemption, disaggregation, limits and errors."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
GOLDEN = os.path.join(SHARED, "golden", "stories260K-once-upon-a-time.json")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

golden = json.load(open(GOLDEN))
PROMPTS = ["Once upon a time", "The little dog was", "Lily went to the park",
           "Tom had a big red ball", "One day, the sun", "She was very happy",
           "The cat and the bird", "Mom said"]


conf = "plugin-dir %s\nsocket-group nogroup\nmax-waiting 64\n" % PLUGINS
d = Daemon(conf=conf, dirmode=0o755).start()

rc, out, err = d.ctl("load", "stories", MODEL, "ctx=512", "kv=f32")
ok(rc == 0 and "loaded" in out, "load stories260K", err)
m = models(d)["stories"]
ok(m["arch"] == "llama" and m["type"] == "F32" and m["ctx"] == 512 and
   m["state"] == "ready", "models shows arch, type, ctx and state", m)
ok(m["params"] > 250000 and m["params"] < 300000, "parameter count is about 260K", m["params"])

# Golden: BOS + "Once upon a time", 200 greedy tokens.
rc, toks, final, err = gen_json(d, "stories", "Once upon a time", "--max-tokens", "200", "--temp", "0")
ok(rc == 0 and toks == golden["greedy_tokens"], "greedy continuation equals the 200 golden tokens",
   "first difference at %s" % next((i for i, (a, b) in enumerate(zip(toks, golden["greedy_tokens"])) if a != b), len(toks)))
ok(final is not None and final["finish_reason"] == "length" and final["output_tokens"] == 200
   and final["prompt_tokens"] == 5, "final object: length, 200 output tokens, 5 prompt tokens", final)
for k in ("prompt_ms", "ttft_ms", "decode_ms", "prompt_tps", "output_tps"):
    ok(final is not None and k in final and final[k] >= 0, "final object has %s" % k)
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "200", "--temp", "0", "Once upon a time")
ok(rc == 0 and out.rstrip("\n") == golden["greedy_text"], "streamed text equals the golden text", out[:200])

# Every architecture of models/arch: models shows it, and greedy tokens
# through the daemon equal llama.cpp's for the first reference prompt.
for name, arch in [("llama3", "llama"), ("mistral-hd", "llama"), ("qwen2", "qwen2"),
                   ("qwen3", "qwen3"), ("gemma2", "gemma2"), ("gemma3", "gemma3"),
                   ("phi3", "phi3")]:
    path = os.path.join(SHARED, "models", "arch", name + ".gguf")
    ref = json.load(open(os.path.join(SHARED, "golden", "arch", name + ".json")))["cases"][0]
    rc, out, err = d.ctl("load", name, path, "kv=f32")
    ok(rc == 0, "load %s" % name, err)
    ok(models(d)[name]["arch"] == arch, "%s: models shows architecture %s" % (name, arch),
       models(d)[name]["arch"])
    rc, toks, final, err = gen_json(d, name, ref["prompt"], "--max-tokens", "32", "--temp", "0")
    # The daemon does not stream the end-of-generation token the reference keeps.
    want = ref["greedy"][:len(toks)]
    ok(rc == 0 and toks == want and len(toks) >= len(ref["greedy"]) - 1,
       "%s: greedy tokens through the daemon equal llama.cpp's" % name, (toks, ref["greedy"]))
    d.ctl("unload", name)

# Solo reference tokens for each prompt.
solo = {}
for p in PROMPTS:
    rc, toks, final, err = gen_json(d, "stories", p, "--max-tokens", "40", "--temp", "0")
    solo[p] = toks
ok(all(len(v) == 40 for v in solo.values()), "solo generations of 40 tokens")

# Concurrent generations under each policy give exactly the solo tokens.
for pol in [["fcfs"], ["decode-reserved", "max_prefill_tokens=8"],
            ["chunked-prefill", "budget=16"], ["chunked-prefill", "tbt_target_ms=2"]]:
    rc, out, err = d.ctl("policy", "set", "stories", *pol)
    ok(rc == 0, "policy set %s" % " ".join(pol), err)
    res = gen_many(d, "stories", PROMPTS, ["--max-tokens", "40", "--temp", "0"])
    bad = [p for p, (t, r) in zip(PROMPTS, res) if t != solo[p]]
    ok(not bad, "%s: 8 concurrent streams equal their solo tokens" % pol[0], bad)
rc, out, err = d.ctl("--json", "policy", "show", "stories")
ps = json.loads(out)
ok(ps["policy"] == "chunked-prefill" and "tbt_target_ms=2" in ps["params"] and ps["swaps"] >= 4,
   "policy show names the policy, its params and swaps", ps)
ok(ps["plan_errors"] == 0, "no plan errors from the bundled policies", ps)

# 20 swaps among the policies while 16 streams generate.
prompts16 = PROMPTS * 2
procs = [subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate", "stories",
                           "--max-tokens", "40", "--temp", "0", p],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in prompts16]
cycle = [["fcfs"], ["decode-reserved"], ["chunked-prefill", "budget=16"], ["chunked-prefill", "tbt_target_ms=1"]]
swaps_ok = 0
for i in range(20):
    rc, out, err = d.ctl("policy", "set", "stories", *cycle[i % 4])
    swaps_ok += rc == 0
    time.sleep(0.01)
ok(swaps_ok == 20, "20 policy swaps while serving", swaps_ok)
lost = []
for p, pr in zip(prompts16, procs):
    out, err = pr.communicate(timeout=300)
    toks = [json.loads(x)["token_id"] for x in out.decode().splitlines() if "token_id" in x]
    if toks != solo[p]:
        lost.append(p)
ok(not lost, "16 streams across 20 swaps: nothing lost, duplicated or changed", lost)

# Policy errors leave the old policy active.
d.ctl("policy", "set", "stories", "chunked-prefill", "budget=32")
for args, want in [(["../fcfs"], "not a path"), (["no-such-policy"], "no-such-policy"),
                   (["chunked-prefill", "budget=0"], "budget"),
                   (["chunked-prefill", "bogus=1"], "bogus")]:
    rc, out, err = d.ctl("policy", "set", "stories", *args)
    ok(rc == 1 and want in err, "policy set %s is refused" % " ".join(args), err)
rc, out, err = d.ctl("--json", "policy", "show", "stories")
ok(json.loads(out)["policy"] == "chunked-prefill" and "budget=32" in json.loads(out)["params"],
   "the old policy stays active after refused swaps", out)
rc, out, err = d.ctl("policy", "list")
ok(rc == 0 and all(n in out for n in ("fcfs", "decode-reserved", "chunked-prefill", "disaggregated")),
   "policy list shows the four policies", out)

# Clients that vanish mid-stream: their KV is freed.
procs = [subprocess.Popen([PHASECTL, "-s", d.sock, "generate", "stories", "--max-tokens", "400",
                           "--temp", "0", p], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
         for p in PROMPTS]
time.sleep(0.3)
for pr in procs:
    pr.kill()
    pr.wait()
m = wait_idle(d, "stories")
ok(m["kv_blocks_used"] == 0 and m["requests_running"] == 0, "disconnected clients leave 0 KV blocks in use", m)
raw = Client(d.sock)
raw.send(request(1, GENERATE, generate_body("stories", "Once upon a time", max_tokens=300)))
first = raw.recv()
ok(first is not None and R_TOKEN in first, "raw generate streams tokens")
raw.close()
m = wait_idle(d, "stories")
ok(m["kv_blocks_used"] == 0, "a raw client closing mid-stream frees its KV", m)

# Cancel by id.
c = Client(d.sock)
c.send(request(5, GENERATE, generate_body("stories", "Once upon a time", max_tokens=450)))
c.recv()
c.send(request(6, CANCEL, field_varint(1, 5)))
reason = None
acked = False
for _ in range(1000):
    r = c.recv()
    if r is None:
        break
    if r[1][0] == 6:
        acked = R_OK in r
    if r[1][0] == 5 and R_DONE in r:
        reason = done_reason(r)
        break
ok(acked and reason is not None and reason[0] == "cancelled", "cancel by id ends the stream as cancelled", reason)

# A deadline.
r = c.call(7, GENERATE, generate_body("stories", "Once upon a time", max_tokens=450, deadline_ms=1))
while r is not None and R_TOKEN in r:
    r = c.recv()
reason = done_reason(r)
ok(reason is not None and reason[0] == "error" and "deadline" in reason[1], "a 1 ms deadline ends with an error", reason)

# Prompt longer than the context, unknown model, bad parameters.
longp = "Once upon a time " * 200
rc, out, err = d.ctl("generate", "stories", longp)
ok(rc == 1 and "does not fit the context of 512" in err, "a prompt longer than the context is refused", err)
rc, out, err = d.ctl("generate", "nosuch", "hi")
ok(rc == 1 and "no model nosuch" in err, "unknown model", err)
rc, out, err = d.ctl("generate", "stories", "--top-p", "1.5", "hi")
ok(rc == 2 and "--top-p 1.5 is out of range 0..1" in err, "phasectl checks --top-p", err)
r = c.call(8, GENERATE, generate_body("stories", "hi", temperature=-1.0))
e = error_of(r)
ok(e is not None and "temperature" in e[1], "the daemon checks the temperature", e)
c.close()

# Same seed, same output; sampling differs from greedy.
a = gen_json(d, "stories", "Once upon a time", "--max-tokens", "30", "--temp", "0.9", "--seed", "42")[1]
b = gen_json(d, "stories", "Once upon a time", "--max-tokens", "30", "--temp", "0.9", "--seed", "42")[1]
c2 = gen_json(d, "stories", "Once upon a time", "--max-tokens", "30", "--temp", "0.9", "--seed", "43")[1]
ok(a == b and len(a) == 30, "same seed, same tokens")
ok(a != c2, "another seed, other tokens")

# Stop strings.
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "200", "--temp", "0", "--stop", "park", "Once upon a time")
ok(rc == 0 and out.rstrip("\n") == golden["greedy_text"].split("park")[0], "a stop string ends the text before it", out)
rc, toks, final, err = gen_json(d, "stories", "Once upon a time", "--max-tokens", "200", "--temp", "0", "--stop", "park")
ok(final is not None and final["finish_reason"] == "stop", "finish_reason stop", final)

# Unprivileged peers: generation yes, admin no.
rc, out, err = d.ctl("generate", "stories", "--max-tokens", "5", "Once", user="nobody")
ok(rc == 0 and len(out) > 1, "nobody may generate", err)
for args in (["load", "x", MODEL], ["unload", "stories"], ["policy", "set", "stories", "fcfs"]):
    rc, out, err = d.ctl(*args, user="nobody")
    ok(rc == 1 and "permission denied: %s requires admin" % " ".join(args[:2] if args[0] == "policy" else args[:1]) in err,
       "nobody cannot %s" % " ".join(args[:2]), err)

# Hostile model files are refused and the daemon keeps serving.
blob = open(MODEL, "rb").read()
bad_files = {
    "truncated": blob[:len(blob) // 2],
    "bad magic": b"GGUX" + blob[4:],
    "bad version": blob[:4] + b"\x09\x00\x00\x00" + blob[8:],
    "empty": b"",
}
for name, data in bad_files.items():
    path = os.path.join(d.dir, "bad.gguf")
    with open(path, "wb") as f:
        f.write(data)
    rc, out, err = d.ctl("load", "bad", path)
    ok(rc == 1 and len(err.strip()) > 10, "loading a %s file fails with an error" % name, err.strip())
    rc, toks, final, err = gen_json(d, "stories", "Once upon a time", "--max-tokens", "5", "--temp", "0")
    ok(toks == golden["greedy_tokens"][:5], "after the %s file the model still serves" % name)
rc, out, err = d.ctl("load", "stories", MODEL)
ok(rc == 1 and "already loaded" in err, "loading a name twice is refused", err)
rc, out, err = d.ctl("load", "x", MODEL, "ctx=abc")
ok(rc == 1 and "ctx 'abc' is not an integer" in err, "a bad load option is refused", err)
rc, out, err = d.ctl("load", "x", MODEL, "groups=mixed:cuda0")
ok(rc == 1 and ("backend cuda is not built" in err or "cuda: " in err),
   "a GPU group without a usable CUDA backend is refused", err)
rc, out, err = d.ctl("load", "x", MODEL, "groups=prefill:cuda0-1/decode:cuda2+cuda3")
ok(rc == 1 and ("backend cuda is not built" in err or "cuda: " in err),
   "tensor-parallel GPU groups parse and reach the backend", err)
for opt, want in (("groups=mixed:cuda0+cuda0", "device group cuda0+cuda0 lists cuda0 twice"),
                  ("groups=mixed:cuda0-9", "device group cuda0-9 lists more than 8 gpus"),
                  ("groups=mixed:cuda1-0", "bad device 'cuda1-0' (expected e.g. cuda0, cuda0-1 or cuda0+cuda2)"),
                  ("groups=mixed:cuda0+cpu1", "bad device 'cuda0+cpu1'")):
    rc, out, err = d.ctl("load", "badgpu", MODEL, opt)
    ok(rc == 1 and want in err, "load %s is refused by name" % opt, err)
rc, out, err = d.ctl("load", "x", MODEL, "frobs=1")
ok(rc == 1 and "unknown option 'frobs'" in err, "an unknown load option is refused", err)
for opt, want in (("policy-deadline=0", "policy-deadline 0 is out of range 1..1000"),
                  ("policy-deadline=5000", "policy-deadline 5000 is out of range 1..1000"),
                  ("keep-alive=soon", "keep-alive 'soon' is not a duration"),
                  ("load=maybe", "load 'maybe' is not lazy or start"),
                  ("cuda-graphs=maybe", "cuda-graphs 'maybe' is not on, off or auto")):
    rc, out, err = d.ctl("load", "badopt", MODEL, opt)
    ok(rc == 1 and want in err, "load %s is refused by name" % opt, err)
ok("badopt" not in models(d), "no model is left behind by the refused loads")

# Requests naming a model that does not exist.
for args in (["stats", "nosuch"], ["policy", "show", "nosuch"], ["unload", "nosuch"],
             ["policy", "set", "nosuch", "fcfs"], ["trace", "nosuch", "-o", "/dev/null"]):
    rc, out, err = d.ctl(*args)
    ok(rc == 1 and "no model nosuch" in err, "%s of an unknown model is an error" % " ".join(args[:2]), err)
rc, out, err = d.ctl("trace", "stories", "--seconds", "0", "-o", "/dev/null")
ok(rc == 2 and "--seconds 0 is out of range 1..3600" in err, "trace checks --seconds", err)

# Stats, metrics and trace.
rc, out, err = d.ctl("--json", "stats", "stories")
st = json.loads(out)["models"][0]
ok(rc == 0 and st["model"] == "stories" and "ttft" in st["window"] and "tbt" in st["window"],
   "stats --json has ttft and tbt rows", list(st["window"].keys()))
tok_before = st["output_tokens"]
fin_before = st["counters"]["finished_length"]
gen_json(d, "stories", "Once upon a time", "--max-tokens", "17", "--temp", "0")
st = json.loads(d.ctl("--json", "stats", "stories")[1])["models"][0]
ok(st["output_tokens"] - tok_before == 17, "stats count exactly the 17 new output tokens",
   st["output_tokens"] - tok_before)
ok(st["counters"]["finished_length"] == fin_before + 1, "and one more request finished by length")
rc, out, err = d.ctl("metrics")
ok(rc == 0 and "phased_time_to_first_token_seconds_bucket" in out and 'model="stories"' in out,
   "metrics speaks the Prometheus format", out[:200])
rc, out, err = d.ctl("top", "--count", "2")
lines = [x for x in out.splitlines() if " stories " in x]
ok(rc == 0 and len(lines) == 2 and "chunked-prefill" in lines[0],
   "top prints a plain line per model and refresh when not on a terminal", out)
rc, out, err = d.ctl("--json", "top", "--count", "1")
ok(rc == 0 and json.loads(out)["models"][0]["model"] == "stories", "top --json", out[:200])
trace = os.path.join(d.dir, "trace.json")
tp = subprocess.Popen([PHASECTL, "-s", d.sock, "trace", "stories", "--seconds", "2", "-o", trace],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
time.sleep(0.3)
gen_json(d, "stories", "Once upon a time", "--max-tokens", "20", "--temp", "0")
out, err = tp.communicate(timeout=30)
ok(tp.returncode == 0, "trace completes", err)
try:
    tj = json.load(open(trace))
    ev = [e for e in tj["traceEvents"] if e.get("ph") == "X"]
except Exception as ex:  # noqa: BLE001
    tj, ev = None, []
    diag(ex)
ok(len(ev) >= 20, "the trace is valid JSON with an event per iteration (%d)" % len(ev))

# Forced preemption: a tiny KV pool still gives identical tokens.
rc, out, err = d.ctl("load", "tiny", MODEL, "ctx=512", "kv=f32", "kv-tokens=96", "block-size=16")
ok(rc == 0, "load with a 6-block KV pool", err)
bad, st, rounds = gen_preempting(d, "tiny", PROMPTS[:4],
                                 ["--max-tokens", "40", "--temp", "0"], solo)
ok(not bad, "preempted generations give identical tokens", bad)
ok(st["preemptions"] > 0, "preemptions happened (%d, in %d round%s)" %
   (st["preemptions"], rounds, "" if rounds == 1 else "s"))
ok(wait_idle(d, "tiny")["kv_blocks_used"] == 0, "no KV left in use after preemptions")
rc, out, err = d.ctl("unload", "tiny")
ok(rc == 0, "unload", err)

# Disaggregated on two single-core CPU devices.
rc, out, err = d.ctl("load", "dis", MODEL, "ctx=512", "kv=f32", "groups=prefill:cpu0/decode:cpu1")
ok(rc == 0, "load on a prefill group and a decode group", err)
m = models(d)["dis"]
ok(m["policy"] == "disaggregated" and len(m["groups"]) == 2 and m["groups"][0]["role"] == "prefill"
   and m["groups"][1]["role"] == "decode", "two groups, disaggregated policy by default", m)
ok(all(g["weight_bytes"] == [] and g["memory_bytes"] > 0 for g in m["groups"]),
   "cpu groups report their kv memory and no device weights", m["groups"])
res = gen_many(d, "dis", PROMPTS, ["--max-tokens", "40", "--temp", "0"])
bad = [p for p, (t, r) in zip(PROMPTS, res) if t != solo[p]]
ok(not bad, "disaggregated generations equal the solo tokens", bad)
st = json.loads(d.ctl("--json", "stats", "dis")[1])["models"][0]
kvb = st["counters"].get("kv_transfer_bytes", 0)
ok(kvb > 0 and st["counters"].get("kv_transfer_ms", -1) >= 0,
   "stats count the KV bytes moved from prefill to decode (%s)" % kvb, st["counters"])
# A policy host late under load is ejected and fcfs, which never migrates,
# serves the rest where they were prefilled: then fewer requests move.
pol = json.loads(d.ctl("--json", "policy", "show", "dis")[1])
intact = not pol["ejected"] and pol["plan_errors"] == 0
if not intact:
    diag("the disaggregated policy did not plan every iteration: %s" % pol)
rc, out, err = d.ctl("metrics")
moves = [int(x.split()[-1]) for x in out.splitlines()
         if x.startswith('phased_kv_transfers_total{model="dis"} ')]
ok(rc == 0 and 'phased_kv_transfer_bytes_total{model="dis"} %d' % kvb in out
   and len(moves) == 1 and (moves[0] == len(PROMPTS) if intact else 0 < moves[0] <= len(PROMPTS)),
   "metrics count the KV moves (one a request) and their bytes",
   [x for x in out.splitlines() if "kv_transfer" in x])
ok('phased_kv_transfers_async_total{model="dis"} 0' in out
   and 'phased_kv_transfer_queue_seconds_total{model="dis"} ' in out,
   "cpu groups move KV synchronously: no async moves, the queue time counted",
   [x for x in out.splitlines() if "kv_transfer" in x])
secs = {}
for x in out.splitlines():
    for fam in ("phased_kv_transfer_seconds_total", "phased_kv_transfer_queue_seconds_total"):
        for mod in ("stories", "dis"):
            if x.startswith('%s{model="%s"} ' % (fam, mod)):
                secs[fam, mod] = float(x.split()[-1])
ok(len(secs) == 4 and secs["phased_kv_transfer_seconds_total", "stories"] == 0
   and secs["phased_kv_transfer_queue_seconds_total", "stories"] == 0
   and all(0 < secs[f, "dis"] < 60 for f in ("phased_kv_transfer_seconds_total",
                                             "phased_kv_transfer_queue_seconds_total")),
   "the KV move times are seconds: 0 without moves, under a minute for these", secs)
ok(wait_idle(d, "dis")["kv_blocks_used"] == 0, "no KV left in use on either group")
d.ctl("unload", "dis")

# Overload: a waiting queue of 2.
with open(d.conf, "w") as f:
    f.write(conf.replace("max-waiting 64", "max-waiting 2"))
d.ctl("reload")
d.ctl("load", "ov", MODEL, "ctx=512", "max-seqs=1")
res = gen_many(d, "ov", PROMPTS, ["--max-tokens", "60", "--temp", "0"])
rcs = []
procs = [subprocess.Popen([PHASECTL, "-s", d.sock, "generate", "ov", "--max-tokens", "60", p],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in PROMPTS]
errs = [pr.communicate(timeout=120)[1].decode() for pr in procs]
ok(any("overloaded" in e for e in errs), "requests beyond the waiting queue get 'overloaded'", errs)
ok(wait_idle(d, "ov")["kv_blocks_used"] == 0, "overload leaves no KV in use")

# In-flight requests per connection.
with open(d.conf, "w") as f:
    f.write(conf + "max-requests 2\n")
d.ctl("reload")
c = Client(d.sock)
for i in (1, 2, 3):
    c.send(request(i, GENERATE, generate_body("stories", "Once upon a time", max_tokens=100)))
limit = None
for _ in range(2000):
    r = c.recv()
    if r is None:
        break
    if r[1][0] == 3:
        limit = error_of(r)
        break
ok(limit is not None and "too many requests in flight on this connection (limit 2)" in limit[1],
   "a third request in flight on one connection is refused", limit)
c.close()

# Unload with requests running: they end as cancelled.  This model can
# make its 500 tokens in well under 0.1 s, so the unload follows the request
# closely, and an attempt where the request finished first (or arrived after
# the unload) is made again.
last = None
for attempt in range(20):
    if attempt:
        d.ctl("load", "ov", MODEL, "ctx=512", "max-seqs=1")
    pr = subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate", "ov", "--max-tokens", "500",
                           "Once"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.03)
    rc, out, err = d.ctl("unload", "ov")
    gout, gerr = pr.communicate(timeout=30)
    lines = [json.loads(x) for x in gout.decode().splitlines() if x.strip()]
    last = lines[-1] if lines else gerr.decode()
    if rc != 0 or (lines and lines[-1].get("finish_reason") == "cancelled"):
        break
ok(rc == 0, "unload a model with a request running", err)
ok(isinstance(last, dict) and last.get("finish_reason") == "cancelled",
   "the running request ends as cancelled (attempt %d)" % (attempt + 1), last)

rc = d.stop()
ok(rc == 0, "daemon exits cleanly with models loaded")
d.cleanup()

# Models listed in phased.conf are loaded at start.
d = Daemon(conf="plugin-dir %s\nmodel story \"%s\" ctx=256 policy=chunked-prefill "
           "policy.budget=32\n" % (PLUGINS, MODEL)).start()
state = None
for _ in range(300):
    state = models(d).get("story", {}).get("state")
    if state == "ready":
        break
    time.sleep(0.1)
ok(state == "ready", "a model from phased.conf is loaded at start", state)
m = models(d)["story"]
ok(m["ctx"] == 256 and m["policy"] == "chunked-prefill", "with its options", m)
rc, toks, final, err = gen_json(d, "story", "Once upon a time", "--max-tokens", "10", "--temp", "0")
ok(toks == golden["greedy_tokens"][:10], "and serves the golden tokens")
ok(d.stop() == 0, "daemon exits cleanly")
d.cleanup()
done()
