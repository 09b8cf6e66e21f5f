#!/usr/bin/env python3
"""soak.py: a bounded soak of phased over its Unix socket.

Client threads send thousands of generate requests (greedy, the golden
prompt of stories260K or a random one) and drop some connections
mid-stream on purpose, while a control thread swaps the scheduling policy
of model "a" live (fcfs, chunked-prefill, decode-reserved) and now and
then loads a plugin that hangs, crashes, overruns its plan or corrupts its
view.  Model "b" serves the same load with its default policy.  At the
end, with every client gone, it prints its figures and asserts:

  - 0 lost requests: every request on a connection that was not dropped
    on purpose got a final Done or Error for its id;
  - every greedy golden-prompt request that finished got the golden tokens;
  - 0 KV blocks leaked: each model reports 0 blocks used and 0 requests
    running or waiting once idle (phasectl models and phasectl stats);
  - resident memory flat: the last third of the run adds no more than 2%
    (plus 512 kB) to the daemon's VmRSS (the series is printed: it rises
    in steps early on, the allocator keeping the high-water mark of what
    was live at once, and a leak would show as a slope);
  - the daemon is alive, with one policy host per model (a swapped-out
    host ends at its model's next iteration, so one request each runs
    before the count).

Run from the build directory (or set top_builddir and top_srcdir):
    python3 ../tests/bench/soak.py --duration 300
It exits 0 when every assertion holds.  Not part of make check."""

import argparse
import json
import os
import random
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

SRCDIR = os.environ.get("top_srcdir", os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SRCDIR, "tests", "integration"))
from phasedtest import (BUILD, SHARED, Client, Daemon, GENERATE, HELLO,  # noqa: E402
                        R_DONE, R_ERROR, R_TOKEN, decode, generate_body,
                        hello_body, request)

POLICIES = ["fcfs", "chunked-prefill", "decode-reserved"]
FAULTY = ["evil-loop", "evil-crash", "evil-overrun", "evil-view",
          "evil-sleep"]
PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to",
           "One day, a bird", "Sam had a big red ball", "The sun was"]


class Tally:
    """Counts shared by the client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.done = self.errors = self.dropped = 0
        self.lost = 0
        self.golden_checked = self.golden_bad = 0
        self.tokens = 0
        self.conns = 0
        self.errtext = {}
        self.lost_detail = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def client_loop(sock, tally, golden, stop_at, seed, drop_p):
    """Open connections, send 1 to 4 generations each, read or drop them."""
    rng = random.Random(seed)
    rid = 1
    while time.time() < stop_at:
        try:
            c = Client(sock, timeout=60)
        except OSError:
            time.sleep(0.05)
            continue
        tally.add(conns=1)
        try:
            c.send(request(rid, HELLO, hello_body()))
            rid += 1
            if c.recv() is None:
                c.close()
                continue
            want = {}
            for _ in range(rng.randint(1, 4)):
                model = rng.choice("ab")
                prompt = rng.choice(PROMPTS)
                n = rng.randint(4, 48)
                c.send(request(rid, GENERATE, generate_body(
                    model, prompt, max_tokens=n, temperature=0.0)))
                want[rid] = (prompt, n, [])
                rid += 1
            tally.add(sent=len(want))
            drop_after = (rng.randint(1, 40) if rng.random() < drop_p
                          else None)
            seen = 0
            while want:
                if drop_after is not None and seen >= drop_after:
                    break
                r = c.recv()
                if r is None:
                    break
                i = r.get(1, [0])[0]
                if i not in want:
                    continue
                if R_TOKEN in r:
                    te = decode(r[R_TOKEN][0])
                    want[i][2].append(te[1][0])
                    seen += 1
                elif R_DONE in r or R_ERROR in r:
                    prompt, n, toks = want.pop(i)
                    tally.add(tokens=len(toks))
                    if R_DONE in r:
                        tally.add(done=1)
                        if prompt == PROMPTS[0]:
                            ok = toks == golden[:len(toks)] and (
                                len(toks) == n or len(toks) > 0)
                            tally.add(golden_checked=1,
                                      golden_bad=0 if ok else 1)
                    else:
                        e = decode(r[R_ERROR][0])
                        msg = e.get(2, [b""])[0].decode(errors="replace")
                        tally.add(errors=1)
                        with tally.lock:
                            tally.errtext[msg[:60]] = \
                                tally.errtext.get(msg[:60], 0) + 1
            if want:
                if drop_after is not None:
                    tally.add(dropped=len(want))
                else:
                    tally.add(lost=len(want))
                    with tally.lock:
                        tally.lost_detail.append(sorted(want))
        except (OSError, socket.timeout) as e:
            tally.add(lost=len(want) if "want" in dir() else 0)
        finally:
            # A drop closes the socket with streams open: the daemon
            # must cancel them and free their KV blocks.
            c.close()


def control_loop(d, stop_at, seed, swap_s, fault_every, log):
    """Swap a's policy every swap_s seconds; every fault_every-th a faulty one."""
    rng = random.Random(seed)
    k = 0
    last_ejected = None
    while time.time() < stop_at:
        time.sleep(swap_s)
        if time.time() >= stop_at:
            break
        # Why the policy of the last swap was ended, if it was.
        try:
            rc, out, err = d.ctl("--json", "policy", "show", "a", timeout=30)
            ej = json.loads(out).get("ejected") if rc == 0 else None
        except Exception:  # noqa: BLE001 (counted as a control failure below)
            ej = None
        if ej and ej != last_ejected:
            log.append(("ejected", 0, 0, ej[:100]))
        last_ejected = ej
        k += 1
        name = (rng.choice(FAULTY) if k % fault_every == 0
                else rng.choice(POLICIES))
        try:
            t0 = time.time()
            rc, out, err = d.ctl("policy", "set", "a", name, timeout=30)
            log.append((name, rc, round((time.time() - t0) * 1000, 1),
                        err.strip()[:80]))
            for cmd in (("status",), ("--json", "models")):
                rc, out, err = d.ctl(*cmd, timeout=30)
                if rc != 0:
                    log.append(("control", rc, 0, "%s failed: %s" %
                                (cmd[-1], err.strip()[:80])))
        except Exception as e:  # a timeout or a missing phasectl
            log.append(("control", -1, 0, repr(e)[:80]))


def mem_kb(pid):
    """VmRSS, RssAnon and RssFile of a process in kB."""
    m = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k = line.split(":")[0]
            if k in ("VmRSS", "RssAnon", "RssFile"):
                m[k] = int(line.split()[1])
    return m


def rss_sampler(d, stop_at, every, out):
    """Memory of the daemon every few seconds: [(seconds, VmRSS, RssAnon)]."""
    t0 = time.time()
    while time.time() < stop_at:
        try:
            m = mem_kb(d.proc.pid)
        except OSError:
            return
        out.append((round(time.time() - t0), m["VmRSS"], m["RssAnon"]))
        time.sleep(every)


def model_state(d):
    rc, out, err = d.ctl("--json", "models")
    return {m["name"]: m for m in json.loads(out)} if rc == 0 else {}


def wait_idle(d, timeout=60):
    m = {}
    for _ in range(timeout * 10):
        m = model_state(d)
        if m and all(x.get("requests_running", 0) == 0 and
                     x.get("requests_waiting", 0) == 0 and
                     x.get("kv_blocks_used", 0) == 0 for x in m.values()):
            break
        time.sleep(0.1)
    return m


def stats_kv(d, name):
    """(kv_blocks_used, requests_running, requests_waiting) from stats."""
    rc, out, err = d.ctl("--json", "stats", name)
    if rc != 0:
        return None
    for line in out.splitlines():
        try:
            s = json.loads(line)
        except ValueError:
            continue
        rows = (s.get("models", [s]) if isinstance(s, dict) else s)
        for r in rows:
            if r.get("model") == name:
                return (r.get("kv_blocks_used"), r.get("requests_running"),
                        r.get("requests_waiting"))
    return None


def metric_kv(d):
    """phased_kv_blocks_used per model from the metrics."""
    rc, out, err = d.ctl("metrics")
    kv = {}
    for line in out.splitlines():
        if line.startswith("phased_kv_blocks_used{"):
            lab = line[line.index("{") + 1:line.index("}")]
            model = dict(x.split("=", 1) for x in lab.split(","))
            kv[model.get("model", "?").strip('"')] = float(line.split()[-1])
    return kv


def policy_hosts(pid):
    """The daemon's policy host children: [(pid, state, arguments)]."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                st = f.read()
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        fields = st.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and (b"policy-host" in cmd or
                                      "policy-host" in st):
            out.append((int(p), fields[0],
                        cmd.replace(b"\0", b" ").decode(errors="replace")[-60:]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=300,
                    help="seconds of load (default 300, at most 540)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--drop", type=float, default=0.2,
                    help="share of connections dropped mid-stream")
    ap.add_argument("--swap", type=float, default=2.0,
                    help="seconds between policy swaps on model a")
    ap.add_argument("--fault-every", type=int, default=5,
                    help="every Nth swap loads a faulty plugin")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default=os.path.join(SHARED, "models",
                                                    "stories260K.gguf"))
    args = ap.parse_args()
    args.duration = min(args.duration, 540)

    golden = json.load(open(os.path.join(
        SHARED, "golden", "stories260K-once-upon-a-time.json")))["greedy_tokens"]
    # The policy hosts run unprivileged: they must be able to read it.
    plugdir = tempfile.mkdtemp(prefix="phased-soak-plugins-")
    os.chmod(plugdir, 0o755)
    for sub, names in (("policies/.libs", POLICIES),
                       ("tests/plugins/evil/.libs", FAULTY)):
        for n in names:
            src = os.path.join(BUILD, sub, n + ".so")
            if not os.path.exists(src):
                sys.exit("soak: no %s (make check builds the test plugins)"
                         % src)
            shutil.copy(src, os.path.join(plugdir, n + ".so"))
    conf = ("plugin-dir %s\ndefault-policy builtin\n"
            "model a \"%s\" ctx=512 policy-deadline=200\n"
            "model b \"%s\" ctx=512 policy=decode-reserved\n"
            % (plugdir, args.model, args.model))
    d = Daemon(conf=conf).start()
    for _ in range(300):
        m = model_state(d)
        if len(m) == 2 and all(x["state"] == "ready" for x in m.values()):
            break
        time.sleep(0.1)

    tally = Tally()
    log = []
    t_start = time.time()
    warm = min(20.0, args.duration / 5)
    stop_at = t_start + args.duration
    threads = [threading.Thread(target=client_loop, args=(
        d.sock, tally, golden, stop_at, args.seed * 1000 + i, args.drop))
        for i in range(args.clients)]
    threads.append(threading.Thread(target=control_loop, args=(
        d, stop_at, args.seed, args.swap, args.fault_every, log)))
    rss_series = []
    threads.append(threading.Thread(target=rss_sampler, args=(
        d, stop_at, max(args.duration / 30, 1), rss_series)))
    for t in threads:
        t.start()
    time.sleep(warm)
    rss_start = d.rss_kb()
    sent_at_warm = tally.sent
    for t in threads:
        t.join()
    elapsed = time.time() - t_start
    d.ctl("policy", "set", "a", "fcfs")
    # A swap ends the old policy host at the model's next iteration: run
    # one so that only the current hosts remain.
    for n in ("a", "b"):
        d.ctl("generate", n, "--max-tokens", "2", "Once")
    m = wait_idle(d)
    time.sleep(1)
    rss_end = d.rss_kb()
    kv = {n: x.get("kv_blocks_used") for n, x in m.items()}
    busy = {n: (x.get("requests_running"), x.get("requests_waiting"))
            for n, x in m.items()}
    skv = {n: stats_kv(d, n) for n in ("a", "b")}
    mkv = metric_kv(d)
    rc, out, err = d.ctl("metrics")
    ej = [x for x in out.splitlines()
          if x.startswith("phased_policy_ejections_total")]
    time.sleep(1)
    hosts = policy_hosts(d.proc.pid)
    alive = d.alive()
    faults = sum(1 for x in log if x[0] in FAULTY)
    swaps = sum(1 for x in log if x[0] in POLICIES)
    ctl_fail = [x for x in log if x[0] == "control" or
                (x[0] in POLICIES and x[1] != 0)]
    swap_ms = sorted(x[2] for x in log if x[0] in POLICIES + FAULTY)

    print("soak: %.0f s, %d client threads, drop share %.2f, seed %d"
          % (elapsed, args.clients, args.drop, args.seed))
    print("  connections        %d" % tally.conns)
    print("  requests sent      %d (%.1f/s)" % (tally.sent,
                                                 tally.sent / elapsed))
    print("  done               %d" % tally.done)
    print("  error              %d %s" % (tally.errors,
                                           json.dumps(tally.errtext)))
    print("  dropped on purpose %d" % tally.dropped)
    print("  lost               %d %s" % (tally.lost, tally.lost_detail[:5]))
    print("  tokens received    %d (%.0f/s)" % (tally.tokens,
                                                 tally.tokens / elapsed))
    print("  golden checked     %d, mismatched %d" % (tally.golden_checked,
                                                      tally.golden_bad))
    print("  policy swaps       %d, faulty plugins loaded %d, "
          "control failures %d" % (swaps, faults, len(ctl_fail)))
    if swap_ms:
        print("  policy set ms      p50 %.1f, max %.1f" % (
            swap_ms[len(swap_ms) // 2], swap_ms[-1]))
    print("  ejections          %s" % "; ".join(ej))
    print("  KV blocks used     %s of %s (stats: %s, metrics: %s)" % (
        kv, {n: x.get("kv_blocks_total") for n, x in m.items()}, skv, mkv))
    print("  running/waiting    %s" % busy)
    print("  policy hosts       %d %s" % (len(hosts), hosts))
    print("  VmRSS              %d kB after %.0f s warm-up (%d requests), "
          "%d kB at the end (%+.1f%%)" % (
              rss_start, warm, sent_at_warm, rss_end,
              100.0 * (rss_end - rss_start) / max(rss_start, 1)))
    print("  VmRSS series (s:kB, RssAnon) %s" % " ".join(
        "%d:%d,%d" % x for x in rss_series))
    # Flat: no growth with the number of requests.  The allocator keeps
    # the high-water mark of what was live at once (a backlog while a
    # faulty plugin held its model), so the series rises in steps early
    # on; what a leak would show is a slope, so the last third of the run
    # must add no more than 2% (+512 kB) to the VmRSS it started with.
    third = [(t, kb) for t, kb, a in rss_series if t >= elapsed * 2 / 3]
    t3, kb3 = third[0] if third else (elapsed, rss_end)
    sent3 = max(tally.sent * (elapsed - t3) / elapsed, 1)
    print("  VmRSS last third   %d kB at %d s, %d kB at the end: %+.0f bytes "
          "per request" % (kb3, t3, rss_end, (rss_end - kb3) * 1024.0 / sent3))
    ejected = [x[3] for x in log if x[0] == "ejected"]
    regular = [e for e in ejected if not any(f in e for f in FAULTY)]
    print("  ejections seen     %d, of regular policies %d %s" % (
        len(ejected), len(regular), regular[:5]))
    for x in ctl_fail[:10]:
        print("  control failure: %s" % (x,))

    checks = [
        ("daemon alive", alive),
        ("0 lost requests", tally.lost == 0),
        ("every request accounted for", tally.sent == tally.done +
         tally.errors + tally.dropped + tally.lost),
        ("golden tokens", tally.golden_bad == 0 and tally.golden_checked > 0),
        ("0 KV blocks leaked", len(kv) == 2 and all(v == 0 for v in
                                                    kv.values()) and
         all(s is not None and s[0] == 0 for s in skv.values()) and
         all(v == 0 for v in mkv.values())),
        ("0 requests left", all(b == (0, 0) for b in busy.values())),
        ("resident memory flat", rss_end <= kb3 * 1.02 + 512),
        ("control answered", not ctl_fail),
        ("one policy host per model", len(hosts) == 2),
    ]
    # A sanitizer build's daemon reports leaks at exit with a status of 23.
    rc = d.stop()
    checks.append(("the daemon exits 0 after SIGTERM", rc == 0))
    if rc != 0:
        print("  daemon exit status %s; the end of its log:" % rc)
        for line in d.logtext().splitlines()[-40:]:
            print("  | " + line)
    d.cleanup()
    shutil.rmtree(plugdir, ignore_errors=True)
    bad = [n for n, c in checks if not c]
    for n, c in checks:
        print("%s %s" % ("ok  " if c else "FAIL", n))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
