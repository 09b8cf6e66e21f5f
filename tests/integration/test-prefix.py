#!/usr/bin/env python3
"""The prefix cache on stories260K: identical tokens with and without it,
shared prefixes across concurrent requests, preemption of requests sharing
blocks in a tiny pool, disaggregated groups, a live policy swap, cached
tokens in Done, stats, metrics and the HTTP usage, and no KV left in use
after a client disconnects."""

import http.client
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

# About 100 tokens each; the suffixes make them differ after the shared part.
SHARED_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to "
               "play outside in the park with her friends. One day, she saw a big "
               "red ball under a tree and ran to get it. Her mom said")
SUFFIXES = [" yes.", " no, Lily.", " be careful!", " come home.", " look up.",
            " it is time to eat."]
PROMPTS = [SHARED_TEXT + s for s in SUFFIXES]
OPTS = ["--max-tokens", "40", "--temp", "0"]


def cache_counters(st):
    """A model's prefix cache counters from its stats, named as the metrics."""
    return {"prefix_cache_" + k: v for k, v in st["prefix_cache"].items()}


def stats(d, name):
    st = json.loads(d.ctl("--json", "stats", name)[1])["models"][0]
    return st, cache_counters(st)


conf = "plugin-dir %s\nsocket-group nogroup\nmax-waiting 64\n" % PLUGINS
d = Daemon(conf=conf, dirmode=0o755).start()

rc, out, err = d.ctl("load", "nc", MODEL, "ctx=512", "kv=f32", "prefix-cache=no")
ok(rc == 0, "load with prefix-cache=no", err)
rc, out, err = d.ctl("load", "pc", MODEL, "ctx=512", "kv=f32")
ok(rc == 0, "load with the prefix cache (the default)", err)
rc, out, err = d.ctl("load", "bad", MODEL, "prefix-cache=maybe")
ok(rc != 0 and "prefix-cache 'maybe' is not yes or no" in err,
   "a bad prefix-cache value is refused by name", err)

# Reference tokens without the cache, one request at a time.
solo = {}
for p in PROMPTS:
    rc, toks, final, err = gen_json(d, "nc", p, *OPTS)
    solo[p] = toks
    ok(rc == 0 and len(toks) == 40 and final["cached_tokens"] == 0,
       "no cache: 40 tokens, nothing cached", (rc, len(toks), final, err))
n_prompt = final["prompt_tokens"]
ok(n_prompt > 64, "the prompts are over four blocks (%d tokens)" % n_prompt)

# Cold, then warm: the same tokens, the second prefill mostly from the cache.
p0 = PROMPTS[0]
rc, toks, final, err = gen_json(d, "pc", p0, *OPTS)
ok(rc == 0 and toks == solo[p0] and final["cached_tokens"] == 0,
   "cold cache: identical tokens, 0 cached", (final, err))
rc, toks, final, err = gen_json(d, "pc", p0, *OPTS)
c = final["cached_tokens"]
ok(rc == 0 and toks == solo[p0], "warm cache: identical tokens", (toks, solo[p0]))
ok(c > 0 and c % 16 == 0 and c < final["prompt_tokens"] and
   c >= final["prompt_tokens"] - 16,
   "warm cache: every full block of the prompt but the last token's reused (%d of %d)"
   % (c, final["prompt_tokens"]), final)

# Multi-turn: the next turn resends the prompt and the answer; the answer's
# blocks were cached as they were decoded.
turn2 = p0 + final["text"] + " Then"
rc, toks2, final2, err = gen_json(d, "nc", turn2, *OPTS)
rc, toksc, finalc, err = gen_json(d, "pc", turn2, *OPTS)
ok(rc == 0 and toksc == toks2, "second turn: identical tokens with the cache", err)
ok(finalc["cached_tokens"] > c, "second turn reuses the first turn's answer too "
   "(%d > %d cached)" % (finalc["cached_tokens"], c), finalc)

# Concurrent requests sharing the prefix.
st0, cn0 = stats(d, "pc")
res = gen_many(d, "pc", PROMPTS, OPTS)
bad = [p for p, (t, f) in zip(PROMPTS, res) if t != solo[p]]
ok(not bad, "concurrent requests sharing a prefix give identical tokens", bad)
ok(all(f["cached_tokens"] >= 64 for t, f in res),
   "every one of them reused the shared prefix", [f["cached_tokens"] for t, f in res])
st, cn = stats(d, "pc")
ok(cn["prefix_cache_queries"] - cn0["prefix_cache_queries"] == len(PROMPTS),
   "a query per admission", cn)
ok(cn["prefix_cache_hit_tokens"] - cn0["prefix_cache_hit_tokens"] ==
   sum(f["cached_tokens"] for t, f in res), "hit tokens add up to the Done counts", cn)
ok(cn["prefix_cache_blocks"] > 0, "blocks cached (%d)" % cn["prefix_cache_blocks"])
ok(st["prompt_tokens"] - st0["prompt_tokens"] ==
   sum(f["prompt_tokens"] - f["cached_tokens"] for t, f in res),
   "only the uncached prompt tokens were computed", (st["prompt_tokens"], st0["prompt_tokens"]))
m = wait_idle(d, "pc")
ok(m["kv_blocks_used"] == 0, "cached blocks count as free once idle", m)
rc, out, err = d.ctl("metrics")
ok("phased_prefix_cache_hit_tokens_total" in out and
   "phased_prefix_cache_queries_total" in out and
   "phased_prefix_cache_evictions_total" in out and
   "phased_prefix_cache_blocks" in out, "metrics has the prefix cache families")
rc, out, err = d.ctl("stats", "pc")
ok("prefix cache: queries " in out, "stats shows the prefix cache", out)

# A chunked policy swapped in live: same tokens, budget on the uncached part.
rc, out, err = d.ctl("policy", "set", "pc", "chunked-prefill", "budget=24")
ok(rc == 0, "swap in chunked-prefill", err)
res = gen_many(d, "pc", PROMPTS, OPTS)
bad = [p for p, (t, f) in zip(PROMPTS, res) if t != solo[p]]
ok(not bad, "chunked prefill over cached prefixes gives identical tokens", bad)
d.ctl("policy", "set", "pc", "fcfs")

# Disconnect mid-stream: no KV left in use.
pr = subprocess.Popen([PHASECTL, "-s", d.sock, "generate", "pc", "--max-tokens", "400",
                       PROMPTS[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
pr.stdout.read(8)
pr.kill()
pr.wait()
time.sleep(0.3)
m = wait_idle(d, "pc")
ok(m["kv_blocks_used"] == 0 and m["requests_running"] == 0,
   "a client gone mid-stream leaves 0 KV blocks in use", m)

# HTTP: OpenAI usage says how much of the prompt was cached.
HS = os.path.join(d.dir, "phased-http.sock")
try:
    hc = UnixHTTP(HS)
    hc.request("POST", "/v1/completions", json.dumps(
        {"model": "pc", "prompt": p0, "max_tokens": 8, "temperature": 0}),
        {"Content-Type": "application/json"})
    resp = hc.getresponse()
    body = json.loads(resp.read())
    u = body.get("usage", {})
    ok(resp.status == 200 and u.get("prompt_tokens_details", {}).get("cached_tokens", 0) >= 64,
       "OpenAI usage has prompt_tokens_details.cached_tokens", body)
except OSError as ex:
    ok(False, "HTTP completion on %s" % HS, ex)

# phasectl bench --scenario multiturn: every turn after the first reuses its history.
rc, out, err = d.ctl("--json", "bench", "pc", "--scenario", "multiturn", "--conversations", "2",
                     "--turns", "3", "--prompt-len", "48", "--chat-prompt-len", "16",
                     "--output-len", "16", "--quiet")
try:
    rep = json.loads(out)
    mt = rep["multiturn"]
except (ValueError, KeyError):
    rep, mt = {}, {"per_turn": []}
ok(rc == 0 and rep.get("requests") == 6 and rep.get("errors") == 0,
   "multiturn bench: 2 conversations of 3 turns", (rc, out, err))
pt = mt["per_turn"]
ok(len(pt) == 3 and pt[0]["cached_tokens"] == 0 and pt[1]["prompt_tokens"] == 48 + 16 + 16
   and all(t["cached_tokens"] >= t["prompt_tokens"] - 16 - 16 for t in pt[1:]),
   "each later turn resends the history and finds all but the newest part cached", pt)
ok(mt.get("computed_prompt_tokens", -1) + mt.get("cached_tokens", 0) == rep.get("prompt_tokens"),
   "computed plus cached prompt tokens add up", mt)
rc, out, err = d.ctl("bench", "pc", "--scenario", "multiturn", "--rate", "2")
ok(rc != 0 and "no --rate or --concurrency" in err, "multiturn refuses --rate", err)

# Preemption of requests that share blocks: a 12-block pool.
rc, out, err = d.ctl("load", "tiny", MODEL, "ctx=512", "kv=f32", "kv-tokens=192",
                     "block-size=16")
ok(rc == 0, "load with a 12-block KV pool", err)
bad, st, rounds = gen_preempting(d, "tiny", PROMPTS[:4], OPTS, solo)
cn = cache_counters(st)
ok(not bad, "preempted requests sharing blocks give identical tokens", bad)
ok(st["preemptions"] > 0, "preemptions happened (%d, in %d round%s)" %
   (st["preemptions"], rounds, "" if rounds == 1 else "s"))
ok(cn["prefix_cache_hit_tokens"] > 0, "and the cache was used (%d tokens)"
   % cn["prefix_cache_hit_tokens"])
ok(cn["prefix_cache_evictions"] > 0, "a tiny pool evicts cached blocks (%d)"
   % cn["prefix_cache_evictions"])
ok(wait_idle(d, "tiny")["kv_blocks_used"] == 0, "no KV left in use after preemptions")
d.ctl("unload", "tiny")

# Sliding-window layers: a reused block serves every layer, windowed or not.
for name in ("gemma2", "gemma3"):
    path = os.path.join(SHARED, "models", "arch", name + ".gguf")
    if not os.path.exists(path):
        continue
    d.ctl("load", name + "-nc", path, "kv=f32", "prefix-cache=no")
    d.ctl("load", name, path, "kv=f32")
    prompt = SHARED_TEXT * 3
    rc, ref, fr, err = gen_json(d, name + "-nc", prompt, "--max-tokens", "16", "--temp", "0")
    gen_json(d, name, prompt, "--max-tokens", "16", "--temp", "0")
    rc2, toks, final, err2 = gen_json(d, name, prompt + " Then", "--max-tokens", "16", "--temp", "0")
    rc3, ref2, fr2, err3 = gen_json(d, name + "-nc", prompt + " Then", "--max-tokens", "16",
                                    "--temp", "0")
    ok(rc2 == 0 and rc3 == 0 and toks == ref2 and len(toks) > 0 and
       final["cached_tokens"] >= 64,
       "%s: a cached prefix of %d tokens past the sliding window gives identical tokens"
       % (name, final["cached_tokens"] if final else -1), (toks, ref2, err2, err3))
    d.ctl("unload", name)
    d.ctl("unload", name + "-nc")

# Disaggregated: reuse happens in the prefill group's pool.
rc, out, err = d.ctl("load", "dis", MODEL, "ctx=512", "kv=f32",
                     "groups=prefill:cpu0/decode:cpu1")
ok(rc == 0, "load on a prefill group and a decode group", err)
res = gen_many(d, "dis", PROMPTS, OPTS)
res += gen_many(d, "dis", PROMPTS[:2], OPTS)
bad = [p for p, (t, f) in zip(PROMPTS + PROMPTS[:2], res) if t != solo[p]]
ok(not bad, "disaggregated generations with the cache give identical tokens", bad)
ok(res[-1][1]["cached_tokens"] >= 64, "a repeated prompt hits the prefill group's cache",
   res[-1][1])
ok(wait_idle(d, "dis")["kv_blocks_used"] == 0, "no KV left in use on either group")
d.ctl("unload", "dis")

d.stop()
done()
