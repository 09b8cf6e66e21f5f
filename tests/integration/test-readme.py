#!/usr/bin/env python3
"""The README's first command, as written there, in a scratch clone: it must
build out of the source tree, generate the golden story, stop its daemon, and
leave the clone in a state where .ci/run's out-of-tree configure works; then
it must work a second time in the same clone."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

SRCDIR = os.path.realpath(SRC)
SHAREDDIR = os.path.realpath(SHARED)
MODEL = os.path.join(SHAREDDIR, "models", "stories260K.gguf")
GOLDEN = os.path.join(SHAREDDIR, "golden", "stories260K-once-upon-a-time.json")
README = os.path.join(SRCDIR, "README")
CIRUN = os.path.join(SRCDIR, ".ci", "run")
# The command builds the whole tree: bound it well above what two cores need.
LIMIT_S = 1200


def readme_command(text):
    """The first indented (command) line of the README, unindented."""
    for line in text.splitlines():
        if line.startswith("  ") and line.strip():
            return line.strip()
    return None


def apt_packages(cmd):
    """The package names after 'apt-get install' in a shell command line."""
    words = shlex.split(cmd)
    for i in range(len(words) - 1):
        if words[i] == "apt-get" and words[i + 1] == "install":
            out = []
            for w in words[i + 2:]:
                if w in ("&&", "||", ";", "|"):
                    break
                if not w.startswith("-"):
                    out.append(w)
            return out
    return []


def missing_packages(pkgs):
    """The packages dpkg does not list as installed."""
    out = []
    for p in pkgs:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                           capture_output=True, text=True)
        if r.returncode != 0 or "install ok installed" not in r.stdout:
            out.append(p)
    return out


def clone_procs(clone):
    """Pids of the processes whose executable lies inside the clone."""
    out = []
    prefix = clone + os.sep
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            exe = os.readlink(os.path.join("/proc", d, "exe"))
        except OSError:
            continue
        if exe.startswith(prefix):
            out.append(int(d))
    return out


def wait_no_procs(clone, secs=30):
    """Wait until nothing runs from the clone; return what still does."""
    end = time.monotonic() + secs
    while True:
        left = clone_procs(clone)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


def run_shell(cmd, cwd, env):
    """Run one shell command line in its own session; (rc, output).  The
    output goes to a file, so a process it leaves behind holding its stdout
    cannot keep the test waiting."""
    with tempfile.TemporaryFile(mode="w+", errors="replace") as f:
        p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = -1
        f.seek(0)
        out = f.read()
    if rc == -1:
        out += "\n(killed after %d s)" % LIMIT_S
    return rc, out


if not os.path.exists(README):
    skip_all("no README in %s" % SRCDIR)
top = subprocess.run(["git", "-C", SRCDIR, "rev-parse", "--show-toplevel"],
                     capture_output=True, text=True)
if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != SRCDIR:
    skip_all("%s is not a git checkout" % SRCDIR)
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)
if shutil.which("dpkg-query") is None:
    skip_all("no dpkg-query to tell whether the packages are installed")
cmd = readme_command(open(README).read())
pkgs = apt_packages(cmd) if cmd is not None else []
# A test must not install packages or reach the network: the command runs
# with an apt-get that only succeeds when what it is asked for is there.
missing = missing_packages(pkgs)
if missing:
    skip_all("packages the README installs are missing: %s" % " ".join(missing))

ok(cmd is not None and "apt-get install" in cmd,
   "the README starts with a command that installs the build's packages",
   cmd)
if cmd is None:
    done()
if os.path.exists(CIRUN):
    m = re.search(r'^pkgs="([^"]*)"', open(CIRUN).read(), re.M)
    ci_pkgs = m.group(1).split() if m else []
    ok(ci_pkgs and not set(ci_pkgs) - set(pkgs),
       "the README installs every package .ci/run installs",
       "missing from the README: %s" % " ".join(sorted(set(ci_pkgs) - set(pkgs))))

golden = json.load(open(GOLDEN))["greedy_text"]
tmp = tempfile.mkdtemp(prefix="phased-readme-")
# The policy host runs as nobody: it must reach the plugins in the clone.
os.chmod(tmp, 0o755)
clone = os.path.join(tmp, "phased")
try:
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    aptlog = os.path.join(tmp, "apt-get.log")
    with open(os.path.join(bindir, "apt-get"), "w") as f:
        f.write('#!/bin/sh\necho "$*" >> %s\n'
                '[ "$1" != install ] && exit 0\nshift\n'
                'for p; do case $p in -*) ;; *) dpkg-query -W "$p" '
                '>/dev/null 2>&1 || exit 100;; esac; done\n'
                % shlex.quote(aptlog))
    os.chmod(os.path.join(bindir, "apt-get"), 0o755)
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")

    r = subprocess.run(["git", "clone", "-q", SRCDIR, clone],
                       capture_output=True, text=True)
    if not ok(r.returncode == 0, "git clone of the source tree", r.stderr):
        done()
    # Uncommitted changes to tracked files are part of what is tested.
    diff = subprocess.run(["git", "-C", SRCDIR, "diff", "HEAD", "--binary"],
                          capture_output=True)
    if diff.stdout:
        a = subprocess.run(["git", "-C", clone, "apply", "--whitespace=nowarn"],
                           input=diff.stdout, capture_output=True)
        if a.returncode != 0:
            diag("uncommitted changes did not apply; testing HEAD: %s"
                 % a.stderr.decode(errors="replace"))
    os.symlink(SHAREDDIR, os.path.join(tmp, "shared"))
    sock = os.path.join(clone, "build", "phased.sock")

    for n in (1, 2):
        rc, out = run_shell(cmd, clone, env)
        ok(rc == 0, "run %d: the README command succeeds" % n, out[-3000:])
        ok(golden[:120] in out, "run %d: it prints the golden story" % n,
           out[-1500:])
        left = wait_no_procs(clone)
        ok(not left, "run %d: its daemon has stopped" % n,
           "still running: %s" % left)
        ok(not os.path.exists(sock), "run %d: its socket is gone" % n)
        ok(not os.path.exists(os.path.join(clone, "config.status")),
           "run %d: the source tree is not configured in place" % n)
        if n == 1:
            calls = open(aptlog).read() if os.path.exists(aptlog) else ""
            ok("install" in calls, "the command called apt-get install", calls)
            # What .ci/run does next: configure in a directory of its own.
            os.mkdir(os.path.join(clone, "build-ci"))
            rc, out = run_shell("../configure -q",
                                os.path.join(clone, "build-ci"), env)
            ok(rc == 0, "then .ci/run's out-of-tree configure succeeds",
               out[-3000:])
finally:
    for pid in clone_procs(clone):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(tmp, ignore_errors=True)
done()
