#!/usr/bin/env python3
"""A policy plugin can never take the daemon down: plugins that hang, crash,
overrun the plan, corrupt the view, sleep, fork, open files or run code in a
constructor are ended (or refused), the built-in fcfs serves their model
with the same tokens, another model and the control socket keep answering,
and policy show names the reason.  Then SIGTERM ends every open stream
with a final Done or Error for its id."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
GOLDEN = os.path.join(SHARED, "golden", "stories260K-once-upon-a-time.json")
PLUGINS = os.path.join(BUILD, "tests", "plugins", "evil", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)
if not os.path.exists(os.path.join(BUILD, "phased-policy-host")):
    skip_all("no phased-policy-host")

golden = json.load(open(GOLDEN))["greedy_tokens"][:40]
evil_file = os.path.join(tempfile.mkdtemp(prefix="phased-evil-"), "written")
os.chmod(os.path.dirname(evil_file), 0o777)
os.environ["PHASED_EVIL_FILE"] = evil_file


def gen_cmd(d, model):
    return [PHASECTL, "-s", d.sock, "--json", "generate", model,
            "--max-tokens", "40", "--temp", "0", "Once upon a time"]


def tokens_of(out):
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    return [x["token_id"] for x in lines if "token_id" in x]


def show(d, model):
    rc, out, err = d.ctl("--json", "policy", "show", model)
    return json.loads(out) if rc == 0 else {"error": err}


conf = ("plugin-dir %s\ndefault-policy builtin\nsocket-group nogroup\n"
        "model a \"%s\" ctx=256 policy-deadline=1000\n"
        "model b \"%s\" ctx=256\n" % (PLUGINS, MODEL, MODEL))
d = Daemon(conf=conf, dirmode=0o755).start()
for _ in range(300):
    rc, out, err = d.ctl("--json", "models")
    if rc == 0 and sum(m["state"] == "ready" for m in json.loads(out)) == 2:
        break
    time.sleep(0.1)
ok(rc == 0 and sum(m["state"] == "ready" for m in json.loads(out)) == 2,
   "two models load", out + err)

CASES = [
    ("evil-loop", "timed out after 1000 ms"),
    ("evil-sleep", "timed out after 1000 ms"),
    # SIGSEGV; a sanitizer build's crash handler dies on the filter instead
    ("evil-crash", "killed by signal"),
    ("evil-overrun", "killed by signal"),
    ("evil-view", "invalid plans in a row"),
    ("evil-fork", "killed by signal 31 (a forbidden system call)"),
    ("evil-open", "killed by signal 31 (a forbidden system call)"),
]
for name, reason in CASES:
    rc, out, err = d.ctl("policy", "set", "a", name)
    ok(rc == 0, "policy set a %s" % name, err)
    fa = subprocess.Popen(gen_cmd(d, "a"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    time.sleep(0.2)
    rc, out, err = d.ctl("status")
    ok(rc == 0, "%s: status answers during the fault" % name, err)
    rc, out, err = d.ctl("--json", "models")
    ok(rc == 0 and len(json.loads(out)) == 2, "%s: models answers" % name, err)
    fb = subprocess.run(gen_cmd(d, "b"), capture_output=True, timeout=120)
    ok(fb.returncode == 0 and tokens_of(fb.stdout.decode()) == golden,
       "%s: the other model generates the golden tokens" % name,
       fb.stderr.decode())
    out, err = fa.communicate(timeout=120)
    ok(fa.returncode == 0 and tokens_of(out.decode()) == golden,
       "%s: the faulty model's stream completes with fcfs's tokens" % name,
       err.decode())
    ps = show(d, "a")
    ok(ps.get("policy") == "builtin" and reason in (ps.get("ejected") or "")
       and name in (ps.get("ejected") or ""),
       "%s: policy show names the reason: %s" % (name, reason), ps)
ok(not os.path.exists(evil_file), "the plugin could not create a file")

# A constructor runs in the policy host, which dies: the set is refused.
rc, out, err = d.ctl("policy", "set", "a", "evil-ctor")
ok(rc != 0 and "failed while loading" in err and "signal 31" in err,
   "a constructor that writes a file kills only its policy host", err)
ok(not os.path.exists(evil_file), "the constructor could not create a file")
ok(show(d, "a").get("policy") == "builtin", "the old policy stays active")
# A constructor that never returns: the set fails at the load deadline,
# and the control socket answers meanwhile (the load runs off its thread).
ps = subprocess.Popen([PHASECTL, "-s", d.sock, "policy", "set", "a", "evil-hang"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
rc, out, err = d.ctl("status")
ok(rc == 0, "status answers while a plugin's constructor hangs", err)
out, err = ps.communicate(timeout=60)
ok(ps.returncode != 0 and b"timed out after 1000 ms" in err,
   "a constructor that never returns is refused at the deadline", err)
ok(show(d, "a").get("policy") == "builtin", "the old policy stays active")
rc, out, err = d.ctl("policy", "list")
ok(rc == 0 and "evil-ctor" in out and "evil-loop" in out,
   "policy list loads plugins in policy hosts", out + err)

rc, out, err = d.ctl("metrics")
ej = [x for x in out.splitlines()
      if x.startswith("phased_policy_ejections_total") and 'model="a"' in x]
ok(len(ej) == 1 and ej[0].split()[-1] == str(len(CASES)),
   "ejections are counted in the metrics", ej)
ok(d.alive(), "the daemon survived every plugin")

# SIGTERM while streams are open (one on a hung policy): every stream gets
# a final Done or Error for its id, within the grace period.
d.ctl("policy", "set", "a", "evil-loop")
c = Client(d.sock, timeout=30)
c.send(request(1, HELLO, hello_body()))
c.recv()
for rid, model in ((11, "a"), (12, "b"), (13, "a"), (14, "b")):
    c.send(request(rid, GENERATE, generate_body(model, "Once upon a time",
                                                max_tokens=400)))
time.sleep(0.3)
d.signal(signal.SIGTERM)
final = {}
while True:
    r = c.recv()
    if r is None:
        break
    rid = r.get(1, [0])[0]
    if R_DONE in r or R_ERROR in r:
        final[rid] = "done" if R_DONE in r else "error"
ok(sorted(final) == [11, 12, 13, 14],
   "on SIGTERM every stream ends with a final Done or Error for its id", final)
d.proc.wait(timeout=30)
ok(d.proc.returncode == 0, "the daemon exits 0 after SIGTERM")
d.logf.close()
d.cleanup()
done()
