#!/usr/bin/env python3
"""Tests of the benchmarking tools on stories260K: phasectl bench against a
daemon on a temporary socket (request counts, exact token counts, the
fields of the --json report and the --timeline file, goodput bounded by
throughput, the interference scenario, usage errors) and phased-bench
(prints its figures and exits 0; no speed is asserted)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
PHASED_BENCH = os.path.join(BUILD, "phased-bench")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

LAT = ["ttft", "tbt", "tpot", "e2e", "daemon_ttft", "daemon_tbt", "daemon_queue"]
STAT = ["n", "mean", "p50", "p90", "p99", "max"]


def bench(d, *args):
    """Run phasectl --json bench stories ARGS; (rc, report or None, stderr)."""
    rc, out, err = d.ctl("--json", "bench", "stories", "--quiet", *args)
    try:
        rep = json.loads(out)
    except ValueError:
        rep = None
    return rc, rep, err


def timeline(path):
    with open(path) as f:
        return json.load(f)["requests"]


d = Daemon(conf="plugin-dir %s\n" % PLUGINS).start()
try:
    rc, out, err = d.ctl("load", "stories", MODEL, "ctx=128")
    ok(rc == 0, "stories260K loads", err)
    tl = os.path.join(d.dir, "timeline.json")

    # Closed loop: 9 requests, 3 in flight.
    rc, rep, err = bench(d, "--concurrency", "3", "--requests", "9",
                         "--prompt-len", "20", "--output-len", "12",
                         "--seed", "5", "--timeline", tl)
    ok(rc == 0 and rep is not None, "bench --concurrency exits 0 with JSON", err)
    rep = rep or {}
    for k in ["model", "mode", "prompt_source", "requests", "completed", "errors",
              "finish_reasons", "duration_s", "request_throughput", "prompt_tokens",
              "output_tokens", "prompt_tps", "output_tps", "goodput", "slo_ttft_ms",
              "slo_tbt_ms", "concurrency", "latency_ms"]:
        ok(k in rep, "report has %s" % k)
    lat = rep.get("latency_ms", {})
    ok(all(k in lat and all(s in lat[k] for s in STAT) for k in LAT),
       "latency_ms has %s, each with %s" % (", ".join(LAT), ", ".join(STAT)), lat)
    is_int = lambda a, b, desc: ok(a == b, desc, "got %r, want %r" % (a, b))  # noqa: E731
    is_int(rep.get("mode"), "concurrency", "mode is concurrency")
    is_int(rep.get("prompt_source"), "text", "prompts are tokenized text")
    is_int(rep.get("requests"), 9, "9 requests sent")
    is_int(rep.get("completed"), 9, "9 requests completed")
    is_int(rep.get("errors"), 0, "no errors")
    is_int(sum(rep.get("finish_reasons", {}).values()), 9, "finish reasons count 9")
    is_int(rep.get("prompt_tokens"), 9 * 20, "daemon saw exactly 9 x 20 prompt tokens")
    reqs = timeline(tl)
    is_int(len(reqs), 9, "timeline has 9 requests")
    n_len = sum(1 for r in reqs if r["finish"] == "length")
    ok(all(len(r["tokens_ms"]) == 12 for r in reqs if r["finish"] == "length"),
       "every request finished by length has 12 tokens")
    ok(all(len(r["tokens_ms"]) <= 12 for r in reqs), "no request has more than 12 tokens")
    is_int(rep.get("output_tokens"), sum(len(r["tokens_ms"]) for r in reqs),
           "output_tokens is the sum of the timeline's tokens")
    if n_len == 9:
        is_int(rep.get("output_tokens"), 9 * 12, "output tokens = 9 x 12")
    ok(all(len(r["daemon_us"]) == len(r["tokens_ms"]) for r in reqs),
       "each token has a daemon time")
    ok(all(r["send_ms"] <= r["tokens_ms"][0] <= r["done_ms"] for r in reqs if r["tokens_ms"]),
       "send <= first token <= done")
    ok(all(b >= a for r in reqs for a, b in zip(r["tokens_ms"], r["tokens_ms"][1:])),
       "token times never go back")
    ok(rep.get("goodput", 1) <= rep.get("request_throughput", 0) + 1e-9,
       "goodput <= throughput")
    is_int(lat.get("ttft", {}).get("n"), 9, "9 TTFT samples")
    ok(lat.get("ttft", {}).get("p50", -1) <= lat.get("ttft", {}).get("max", -2),
       "ttft p50 <= max")
    is_int(lat.get("tbt", {}).get("n"), rep.get("output_tokens", 0) - 9,
           "one TBT sample per token after the first")

    # Open loop, Poisson, length ranges, an SLO no request can meet.
    rc, rep, err = bench(d, "--rate", "40", "--requests", "6", "--prompt-len", "10-30",
                         "--output-len", "4-8", "--seed", "3", "--slo-ttft-ms", "0.001",
                         "--timeline", tl)
    ok(rc == 0 and rep is not None, "bench --rate exits 0", err)
    rep = rep or {}
    is_int(rep.get("mode"), "poisson", "mode is poisson")
    is_int(rep.get("completed"), 6, "6 requests completed")
    is_int(rep.get("goodput"), 0, "goodput is 0 under an impossible TTFT SLO")
    reqs = timeline(tl)
    ok(all(10 <= r["prompt_tokens"] <= 30 and 4 <= r["output_len"] <= 8 for r in reqs),
       "lengths drawn within the ranges")
    is_int(rep.get("prompt_tokens"), sum(r["prompt_tokens"] for r in reqs),
           "daemon prompt tokens match the drawn lengths")

    # Gamma arrivals with the same seed draw the same lengths.
    rc1, rep1, _ = bench(d, "--rate", "40", "--burstiness", "0.5", "--requests", "5",
                         "--prompt-len", "5-40", "--output-len", "3", "--seed", "11")
    rc2, rep2, _ = bench(d, "--rate", "40", "--burstiness", "0.5", "--requests", "5",
                         "--prompt-len", "5-40", "--output-len", "3", "--seed", "11")
    ok(rc1 == 0 and rc2 == 0 and rep1 and rep2 and rep1["mode"] == "gamma" and
       rep1["prompt_tokens"] == rep2["prompt_tokens"],
       "gamma arrivals run; one seed gives the same prompt lengths",
       (rep1 or {}).get("prompt_tokens"))

    # A lengths file, cycled.
    lf = os.path.join(d.dir, "lengths.txt")
    with open(lf, "w") as f:
        f.write("# prompt output\n5 3\n7 4\n")
    rc, rep, err = bench(d, "--concurrency", "2", "--requests", "4", "--lengths-file", lf)
    ok(rc == 0 and rep is not None, "bench --lengths-file exits 0", err)
    is_int((rep or {}).get("prompt_tokens"), 24, "lengths file: 5+7+5+7 prompt tokens")

    # Synthetic prompts when the model file cannot be read.
    rc, rep, err = bench(d, "--requests", "2", "--prompt-len", "9", "--output-len", "2",
                         "--model-file", "/nonexistent/model.gguf")
    ok(rc == 0 and rep is not None and rep["prompt_source"] == "synthetic" and
       rep["prompt_tokens"] == 18, "unreadable --model-file: synthetic ids, exact length",
       err)

    # The interference scenario.
    rc, rep, err = bench(d, "--scenario", "interference", "--chats", "2",
                         "--chat-output", "8", "--chat-prompt-len", "6",
                         "--long-prompt-len", "90", "--long-output", "3",
                         "--long-every", "0.2", "--long-count", "2", "--timeline", tl)
    ok(rc == 0 and rep is not None, "interference scenario exits 0", err)
    rep = rep or {}
    inter = rep.get("interference", {})
    is_int(inter.get("long_completed"), 2, "both long prompts completed")
    ok(all(k in inter and all(s in inter[k] for s in STAT)
           for k in ["chat_tbt", "chat_ttft", "chat_stream_gap", "long_ttft"]),
       "interference has chat_tbt, chat_ttft, chat_stream_gap and long_ttft", inter)
    ok(inter.get("chat_stream_gap", {}).get("max", -1) >=
       inter.get("chat_tbt", {}).get("max", 0) and
       inter.get("chat_stream_gap", {}).get("n", -1) >= inter.get("chat_tbt", {}).get("n", 0),
       "stream gaps include every within-request gap")
    is_int(inter.get("long_ttft", {}).get("n"), 2, "two long-prompt TTFT samples")
    reqs = timeline(tl)
    ok(sorted(set(r["stream"] for r in reqs if r["kind"] == "chat")) == [0, 1],
       "two chat streams")
    longs = [r for r in reqs if r["kind"] == "long"]
    ok(len(longs) == 2 and all(r["prompt_tokens"] == 90 for r in longs),
       "two long prompts of 90 tokens")
    # Long prompt k is due k x 0.2 s after the start: a busy machine may
    # send it late, never early.
    ok(len(longs) == 2 and all(r["send_ms"] >= 200 * (k + 1) - 1
                               for k, r in enumerate(longs)),
       "long prompts sent no earlier than every 0.2 s", [r["send_ms"] for r in longs])
    ok(rep.get("goodput", 1) <= rep.get("request_throughput", 0) + 1e-9,
       "interference: goodput <= throughput")

    # The text report.
    rc, out, err = d.ctl("bench", "stories", "--requests", "2", "--output-len", "3",
                         "--prompt-len", "4", "--quiet")
    ok(rc == 0 and "ttft" in out and "goodput" in out and "throughput" in out,
       "text report", out + err)

    # Errors.
    rc, out, err = d.ctl("bench", "nosuch", "--requests", "1")
    ok(rc == 1 and "not loaded" in err, "unknown model: exit 1", (rc, err))
    rc, out, err = d.ctl("bench", "stories", "--burstiness", "2")
    ok(rc == 2 and "--rate" in err, "--burstiness without --rate: usage error", err)
    rc, out, err = d.ctl("bench", "stories", "--prompt-len", "9-3")
    ok(rc == 2, "a backwards range is a usage error", err)
    rc, out, err = d.ctl("bench", "stories", "--bogus", "1")
    ok(rc == 2 and "unknown option" in err, "unknown option", err)
    rc, out, err = d.ctl("bench", "stories", "--requests", "1", "--prompt-len", "200",
                         "--output-len", "4", "--quiet")
    ok(rc == 1 and "error" in out, "a prompt over ctx is counted as an error", out + err)
finally:
    d.stop()
    d.cleanup()

# phased-bench, in process.
if os.path.exists(PHASED_BENCH):
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "32,64", "-n", "8", "-b", "1,4",
                        "-r", "2", "-t", "1"], capture_output=True, timeout=300)
    out = p.stdout.decode()
    ok(p.returncode == 0, "phased-bench exits 0", p.stderr.decode())
    for name in ["pp32", "pp64", "tg8 batch 1", "tg8 batch 4", "roofline", "read alone in",
                 "read share", "VmRSS"]:
        ok(name in out, "phased-bench prints %s" % name, out)
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "16", "-n", "4", "-b", "2",
                        "-r", "3", "--json"], capture_output=True, timeout=300)
    try:
        j = json.loads(p.stdout.decode())
    except ValueError:
        j = {}
    res = j.get("results", [])
    ok(p.returncode == 0 and len(res) == 2, "phased-bench --json: two results",
       p.stdout.decode() + p.stderr.decode())
    ok(all(r["reps"] == 3 and len(r["samples"]) == 3 and
           r["tps_min"] <= r["tps_median"] <= r["tps_max"] for r in res),
       "three samples each, min <= median <= max")
    ok(j.get("memory", {}).get("model_mapped_bytes") == os.path.getsize(MODEL),
       "mapped size is the file size")
    ok(j.get("memory", {}).get("kv_bytes", 0) > 0 and
       j.get("roofline", {}).get("weight_bytes_per_step", 0) > 0,
       "KV bytes and roofline reported")
    # On the CPU the roofline is a read of the step's matrices, about the
    # weights counted from the file (norms aside), and every generation run
    # gets its share of it.
    rl = j.get("roofline", {})
    wb = rl.get("weight_bytes_per_step", 0)
    ok(rl.get("measured") is True and 0.9 * wb <= rl.get("read_bytes", 0) <= 1.1 * wb and
       rl.get("read_ms", 0) > 0 and
       abs(rl.get("bandwidth_gbps", 0) - rl.get("read_bytes", 0) / rl.get("read_ms", 1) / 1e6)
       <= 0.01 * rl.get("bandwidth_gbps", 1),
       "roofline measured: %s bytes read in %s ms against %d counted" %
       (rl.get("read_bytes"), rl.get("read_ms"), wb), json.dumps(rl))
    tg = [r for r in res if r["test"] == "tg"]
    ok(len(tg) == 1 and len(tg[0].get("read_share", [])) == 3 and
       all(v > 0 for v in tg[0]["read_share"]) and
       tg[0]["read_share_min"] <= tg[0]["read_share_median"] <= tg[0]["read_share_max"] and
       all("read_share" not in r for r in res if r["test"] == "pp"),
       "a read share per generation run, none for prompts", json.dumps(tg))
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "0", "-n", "4", "-b", "1", "-r", "2",
                        "-t", "1", "--bw", "20", "--json"], capture_output=True, timeout=300)
    try:
        jb = json.loads(p.stdout.decode())
    except ValueError:
        jb = {}
    rl = jb.get("roofline", {})
    ok(rl.get("measured") is False and rl.get("bandwidth_gbps") == 20 and
       abs(rl.get("max_steps_per_s", 0) - 20e9 / rl.get("weight_bytes_per_step", 1)) < 0.01 and
       all("read_share" not in r for r in jb.get("results", [])),
       "--bw 20: that bandwidth, no read and no share", p.stdout.decode() + p.stderr.decode())
    # -d: the tests start with that many tokens in the KV cache.
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "16", "-n", "4", "-b", "1,2",
                        "-d", "40", "-r", "2", "-t", "1", "--json"],
                       capture_output=True, timeout=300)
    q = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "16", "-n", "4", "-b", "1,2",
                        "-r", "1", "-t", "1", "--json"], capture_output=True, timeout=300)
    try:
        jd = json.loads(p.stdout.decode())
        j0 = json.loads(q.stdout.decode())
    except ValueError:
        jd, j0 = {}, {}
    res = jd.get("results", [])
    ok(p.returncode == 0 and len(res) == 3 and
       all(r["depth"] == 40 and r["tps_median"] > 0 for r in res),
       "phased-bench -d 40: three results at depth 40",
       p.stdout.decode() + p.stderr.decode())
    # Two sequences of 40 + 4 tokens need more KV blocks than of 16 + 4.
    kd = jd.get("memory", {}).get("kv_blocks", 0)
    k0 = j0.get("memory", {}).get("kv_blocks", 0)
    ok(k0 > 0 and kd > k0, "phased-bench -d 40: a larger KV pool (%d blocks "
       "against %d)" % (kd, k0))
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "16", "-n", "4", "-b", "2",
                        "-d", "40", "-r", "1", "-t", "1"], capture_output=True, timeout=300)
    out = p.stdout.decode()
    ok(p.returncode == 0 and "pp16 @ d40" in out and "tg4 batch 2 @ d40" in out,
       "phased-bench -d 40: tests named with their depth", out + p.stderr.decode())
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-d", "-5"], capture_output=True)
    ok(p.returncode == 1 and b"-d" in p.stderr, "phased-bench -d -5: refused",
       p.stderr.decode())
    # --isa: the kernels' instruction set, named in the report.
    isa = jd.get("isa")
    ok(isa in ("scalar", "avx2", "avx512"), "phased-bench --json: isa %r" % isa)
    p = subprocess.run([PHASED_BENCH, "-m", MODEL, "-p", "16", "-n", "2", "-b", "1",
                        "-r", "1", "-t", "1", "--isa", "scalar", "--json"], capture_output=True,
                       timeout=300)
    try:
        js = json.loads(p.stdout.decode())
    except ValueError:
        js = {}
    ok(p.returncode == 0 and js.get("isa") == "scalar" and js.get("bf16_dot") == "none" and
       len(js.get("results", [])) == 2, "phased-bench --isa scalar: runs on the scalar "
       "kernels, no bf16 dot products", p.stdout.decode() + p.stderr.decode())
    for args, want in [(["--isa", "avx9"], "--isa avx9: unknown (scalar, avx2 or avx512)"),
                       (["--isa", "scalar", "--bf16"],
                        "--bf16: the --isa set has no bf16 dot products"),
                       (["--isa"], "--isa needs a value")]:
        p = subprocess.run([PHASED_BENCH, "-m", MODEL] + args, capture_output=True,
                           timeout=300)
        ok(p.returncode == 1 and want in p.stderr.decode(),
           "phased-bench %s: refused" % " ".join(args), p.stderr.decode())
    synth = os.path.join(BUILD, "phased-synth")

    def int16_runs(path, tn):
        """phased-bench of a TN (F16 or BF16) model by default and under
        --exact: all of its TN matrices on 16-bit integer products or none
        by default, none under --exact, and the report says which (each
        run measures the CPU for itself, so each is checked against its
        own choice).  The default run's JSON and the model's count of TN
        matrices."""
        key = tn.lower()
        runs = {}
        for flag in ["--json", "--exact"]:
            q = subprocess.run([PHASED_BENCH, "-m", path, "-p", "16", "-n", "2", "-r", "1",
                                "-t", "1", "--json"] + ([flag] if flag != "--json" else []),
                               capture_output=True, timeout=300)
            try:
                runs[flag] = json.loads(q.stdout.decode())
            except ValueError:
                runs[flag] = {}
        jd, jx = runs["--json"], runs["--exact"]
        n = jd.get(key + "_matrices", 0)
        ok(n > 0 and jd.get(key + "_int16") in (0, n) and jx.get(key + "_int16") == 0 and
           jx.get(key + "_matrices") == n,
           "phased-bench %s: %s of %d matrices on 16-bit integers by default, %s under "
           "--exact" % (tn, jd.get(key + "_int16"), n, jx.get(key + "_int16")))
        q = subprocess.run([PHASED_BENCH, "-m", path, "-p", "16", "-n", "2", "-r", "1",
                            "-t", "1"], capture_output=True, timeout=300)
        out = q.stdout.decode()
        chose = "through 16-bit integer dot products" in \
            next((l for l in out.splitlines() if l.startswith("float weights:")), "")
        said = "%s matrices on 16-bit integer products: %d of %d" % (tn, n, n) in out
        # BF16 takes them where bf16 dot products do not (AVX2, or no fast vdpbf16ps).
        ok(q.returncode == 0 and (said == chose if tn == "F16" else not said or chose),
           "phased-bench %s: the report says so" % tn, out)
        return jd, n

    # An F16 model: its matrices take 16-bit integer products by default
    # where the CPU makes them pay, never under --exact.
    f16 = os.path.join(BUILD, "test-bench-f16-%d.gguf" % os.getpid())
    p = subprocess.run([synth, "--shape", "tiny256", "--type", "F16", "--vocab", MODEL,
                        "--layers", "1", "-o", f16], capture_output=True, timeout=300)
    if ok(p.returncode == 0, "phased-synth writes an F16 model", p.stderr.decode()):
        _, n = int16_runs(f16, "F16")
        # The daemon measures the CPU for itself and logs what it chose; bf16-dot no
        # keeps the model exact.  Either way it generates.
        want = "of %d F16 matrices take 16-bit integer dot products" % n
        for math in ["auto", "no"]:
            d = Daemon(conf="plugin-dir %s\nbf16-dot %s\n" % (PLUGINS, math)).start()
            try:
                rc, out, err = d.ctl("load", "f16", f16, "ctx=64")
                rc2, toks, final, err2 = gen_json(d, "f16", "Once upon", "--max-tokens", "4",
                                                  "--temp", "0")
                log = d.logtext()
                logged = ("model f16: %d " % n + want) in log
                chose = "bf16-dot auto: " in log and "16-bit integer dot products" in \
                    log.split("bf16-dot auto: ", 1)[1].splitlines()[0]
                ok(rc == 0 and rc2 == 0 and len(toks) == 4 and
                   logged == (math == "auto" and chose),
                   "daemon, bf16-dot %s: F16 model loads, generates 4 tokens, %s" %
                   (math, "logs its 16-bit integer matrices" if logged else
                    "no 16-bit integer matrices logged"), err + err2)
            finally:
                d.stop()
                d.cleanup()
    if os.path.exists(f16):
        os.unlink(f16)
    # A BF16 model: on 16-bit integer products where only AVX2 serves.
    bf16 = os.path.join(BUILD, "test-bench-bf16-%d.gguf" % os.getpid())
    p = subprocess.run([synth, "--shape", "tiny256", "--type", "BF16", "--vocab", MODEL,
                        "--layers", "1", "-o", bf16], capture_output=True, timeout=300)
    if ok(p.returncode == 0, "phased-synth writes a BF16 model", p.stderr.decode()):
        jd, _ = int16_runs(bf16, "BF16")
        # Under auto its attention takes bf16 dot products where its
        # matrices do, and the daemon logs it.
        ok(jd.get("attn_bf16") == (jd.get("bf16_dot") == "bf16"),
           "phased-bench BF16: bf16 attention %s with bf16_dot %s" %
           (jd.get("attn_bf16"), jd.get("bf16_dot")))
        d = Daemon(conf="plugin-dir %s\nbf16-dot auto\n" % PLUGINS).start()
        try:
            rc, out, err = d.ctl("load", "bf16", bf16, "ctx=64")
            rc2, toks, final, err2 = gen_json(d, "bf16", "Once upon", "--max-tokens", "4",
                                              "--temp", "0")
            log = d.logtext()
            chose = "bf16-dot auto: vdpbf16ps" in log and "take bf16 dot products" in \
                log.split("bf16-dot auto: vdpbf16ps", 1)[1].splitlines()[0]
            logged = "model bf16: attention on the CPU takes bf16 dot products" in log
            ok(rc == 0 and rc2 == 0 and len(toks) == 4 and logged == chose,
               "daemon, bf16-dot auto: BF16 model loads, generates 4 tokens, %s" %
               ("logs bf16 attention" if logged else "no bf16 attention logged"),
               err + err2)
        finally:
            d.stop()
            d.cleanup()
    if os.path.exists(bf16):
        os.unlink(bf16)
    p = subprocess.run([PHASED_BENCH, "-m", "/nonexistent.gguf"], capture_output=True)
    ok(p.returncode == 1 and b"nonexistent" in p.stderr, "phased-bench: missing model",
       p.stderr.decode())
else:
    diag("phased-bench not built")
done()
