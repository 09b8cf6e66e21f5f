#!/usr/bin/env python3
"""wait-breakdown.py: where the chats' time goes in the interference
scenario, per policy.  Two chats decode while a long prompt arrives; the
script prints, per policy, the mean over rounds and chats of each cause of
the wait breakdown (phasectl --json generate's "wait"), a Markdown table.

usage: top_builddir=BUILD wait-breakdown.py [ROUNDS]   (stories260K.gguf)
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
from phasedtest import BUILD, PHASECTL, SHARED, Daemon, wait_ready  # noqa: E402

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
CAUSES = ("queued", "prefill", "decode", "others_prefill", "preempted",
          "kv_transfer", "client", "scheduling")
POLICIES = (("fcfs", ["fcfs"]), ("decode-reserved", ["decode-reserved"]),
            ("chunked-prefill budget=16", ["chunked-prefill", "budget=16"]),
            ("chunked-prefill budget=64", ["chunked-prefill", "budget=64"]))
LONG = "Once upon a time there was a little girl who loved the park. " * 24


def start(d, prompt, ntok):
    return subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate",
                             "stories", "--max-tokens", str(ntok), "--temp", "0",
                             prompt], stdout=subprocess.PIPE)


def final(p):
    out, _ = p.communicate(timeout=300)
    return json.loads(out.decode().splitlines()[-1])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    d = Daemon(conf="plugin-dir %s\nmodel stories \"%s\" ctx=512\n" % (PLUGINS, MODEL)).start()
    wait_ready(d, "stories")
    acc = {name: [] for name, _ in POLICIES}
    blamed_long = {name: 0 for name, _ in POLICIES}
    for _ in range(rounds):
        for name, pol in POLICIES:
            d.ctl("policy", "set", "stories", *pol)
            chats = [start(d, p, 400) for p in ("Lily went to the park", "The cat and the bird")]
            for c in chats:
                c.stdout.readline()
            long = final(start(d, LONG, 1))
            for c in chats:
                f = final(c)
                acc[name].append(f)
                if f["blamed"] and f["blamed"][0]["id"] == long["request_id"]:
                    blamed_long[name] += 1
    d.cleanup()
    print("Date: %s; command: top_builddir=%s %s %d; model stories260K.gguf, "
          "ctx 512, 2 chats x 400 tokens, one %d-byte prompt arriving while they decode; "
          "load average %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), BUILD,
                               sys.argv[0], rounds, len(LONG),
                               " ".join(open("/proc/loadavg").read().split()[:3])))
    print()
    print("| policy | e2e ms | " + " | ".join(c + " ms" for c in CAUSES) +
          " | others_prefill share | tbt_max ms | long prompt blamed first |")
    print("|---" * (len(CAUSES) + 5) + "|")
    for name, _ in POLICIES:
        fs = acc[name]
        n = len(fs)
        e2e = sum(f["e2e_ms"] for f in fs) / n
        row = [sum(f["wait"][c + "_ms"] for f in fs) / n for c in CAUSES]
        print("| %s | %.1f | %s | %.3f | %.1f | %d of %d |" % (
            name, e2e, " | ".join("%.1f" % v for v in row),
            row[CAUSES.index("others_prefill")] / e2e,
            sum(f["tbt_max_ms"] for f in fs) / n, blamed_long[name], n))


main()
