"""phasedtest: helpers for the integration tests (TAP output, a daemon on a
temporary socket, raw frames and a minimal protobuf codec)."""

import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("top_builddir", os.getcwd())
SRC = os.environ.get("top_srcdir", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("PHASED_SHARED", os.path.join(SRC, "..", "shared"))
PHASED = os.path.join(BUILD, "phased")
PHASECTL = os.path.join(BUILD, "phasectl")

_n = 0
_failed = 0


def ok(cond, desc, detail=None):
    """Report one TAP assertion."""
    global _n, _failed
    _n += 1
    print("%sok %d - %s" % ("" if cond else "not ", _n, desc))
    if not cond:
        _failed += 1
        if detail is not None:
            for line in str(detail).splitlines():
                print("#   " + line)
    sys.stdout.flush()
    return cond


def diag(msg):
    for line in str(msg).splitlines():
        print("# " + line)
    sys.stdout.flush()


def skip_all(why):
    print("1..0 # SKIP " + why)
    sys.exit(0)


def done():
    print("1..%d" % _n)
    sys.exit(1 if _failed else 0)


# Minimal protobuf wire codec: enough to build requests and read replies.
def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(num << 3 | 2) + varint(len(data)) + data


def decode(buf):
    """Decode one message into {field: [values]} (varints or bytes)."""
    out = {}
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            ln, i = _read_varint(buf, i)
            v = buf[i:i + ln]
            i += ln
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("bad wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def _read_varint(buf, i):
    v = 0
    shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def field_float(num, v):
    return varint(num << 3 | 5) + struct.pack("<f", v)


# Request body field numbers (proto/phased.proto).
HELLO, CANCEL, STATUS, RELOAD, SHUTDOWN = 2, 3, 10, 11, 12
LOAD, UNLOAD, MODELS, GENERATE = 20, 21, 22, 30
# Response body field numbers.
R_ERROR, R_OK, R_NOTICE, R_HELLO, R_STATUS = 2, 3, 4, 5, 10
R_MODELS, R_TOKEN, R_DONE = 22, 30, 31


def generate_body(model, prompt, max_tokens=None, temperature=0.0,
                  deadline_ms=None, seed=None):
    """A GenerateRequest."""
    b = field_bytes(1, model) + field_bytes(2, prompt)
    if max_tokens is not None:
        b += field_varint(3, max_tokens)
    b += field_float(4, temperature)
    if seed is not None:
        b += field_varint(9, seed)
    if deadline_ms is not None:
        b += field_varint(12, deadline_ms)
    return b


def done_reason(resp):
    """finish_reason (and error text) of a Done response, or None."""
    if resp is None or R_DONE not in resp:
        return None
    d = decode(resp[R_DONE][0])
    return d[1][0].decode(), d.get(3, [b""])[0].decode()


def request(rid, body_field, body=b""):
    return field_varint(1, rid) + field_bytes(body_field, body)


def hello_body(version=1):
    return field_varint(1, version)


def frame(msg):
    return struct.pack(">I", len(msg)) + msg


class Client:
    """A raw connection speaking frames."""

    def __init__(self, path, timeout=10):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        for _ in range(200):
            try:
                self.s.connect(path)
                break
            except BlockingIOError:
                # the listen backlog is full: the daemon is accepting
                time.sleep(0.01)
        else:
            self.s.connect(path)

    def send_raw(self, data):
        self.s.sendall(data)

    def send(self, msg):
        self.s.sendall(frame(msg))

    def recv(self):
        """One decoded response, or None on EOF."""
        hdr = self._recv_exact(4)
        if hdr is None:
            return None
        (ln,) = struct.unpack(">I", hdr)
        body = self._recv_exact(ln)
        if body is None:
            return None
        return decode(body)

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.s.recv(n - len(buf))
            except (ConnectionResetError, socket.timeout):
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, rid, body_field, body=b""):
        self.send(request(rid, body_field, body))
        return self.recv()

    def is_closed(self):
        """Whether the daemon closed the connection (EOF within the timeout)."""
        try:
            while True:
                if not self.s.recv(4096):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


def error_of(resp):
    """(code, message) of an error response, or None."""
    if resp is None or R_ERROR not in resp:
        return None
    e = decode(resp[R_ERROR][0])
    return e.get(1, [0])[0], e.get(2, [b""])[0].decode()


class Daemon:
    """A phased on a temporary socket, in the foreground."""

    def __init__(self, conf="", args=(), dirmode=0o700):
        self.dir = tempfile.mkdtemp(prefix="phased-test-")
        os.chmod(self.dir, dirmode)
        self.sock = os.path.join(self.dir, "phased.sock")
        self.conf = os.path.join(self.dir, "phased.conf")
        self.log = os.path.join(self.dir, "phased.log")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.args = list(args)
        self.proc = None

    def start(self, wait=True):
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [PHASED, "-d", "-v", "-f", self.conf, "-s", self.sock] + self.args,
            stdout=self.logf, stderr=subprocess.STDOUT)
        if wait:
            for _ in range(600):
                if os.path.exists(self.sock):
                    try:
                        c = Client(self.sock)
                        c.close()
                        return self
                    except OSError:
                        pass
                if self.proc.poll() is not None:
                    raise RuntimeError("phased exited: " + self.logtext())
                time.sleep(0.05)
            raise RuntimeError("phased did not start: " + self.logtext())
        return self

    def logtext(self):
        with open(self.log, "rb") as f:
            return f.read().decode(errors="replace")

    def ctl(self, *args, user=None, input=None, timeout=120):
        cmd = [PHASECTL, "-s", self.sock] + list(args)
        if user is not None:
            # The unprivileged peer: nobody, in the socket's group nogroup.
            cmd = ["setpriv", "--reuid=" + user, "--regid=nogroup",
                   "--clear-groups"] + cmd
        p = subprocess.run(cmd, capture_output=True, timeout=timeout,
                           input=input)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode

    def cleanup(self):
        # A daemon left running would outlive its deleted socket.
        if self.alive():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def gen_json(d, model, prompt, *opts):
    """Run phasectl --json generate; return (rc, tokens, final, stderr)."""
    rc, out, err = d.ctl("--json", "generate", model, *opts, prompt)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    toks = [x["token_id"] for x in lines if "token_id" in x]
    final = lines[-1] if lines and "finish_reason" in lines[-1] else None
    if final is not None:
        final["text"] = "".join(x.get("text", "") for x in lines if "token_id" in x)
    return rc, toks, final, err


def gen_many(d, model, prompts, opts):
    """Start one phasectl per prompt at once; return (tokens, final) each."""
    procs = [subprocess.Popen([PHASECTL, "-s", d.sock, "--json", "generate", model]
                              + list(opts) + [p], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for p in prompts]
    res = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        lines = [json.loads(x) for x in out.decode().splitlines() if x.strip()]
        res.append(([x["token_id"] for x in lines if "token_id" in x],
                    lines[-1] if lines else None))
    return res


def gen_preempting(d, model, prompts, opts, solo, tries=5):
    """Run the prompts at once (gen_many) until the model has preempted.

    The clients are separate processes: on a loaded machine they may start
    too far apart to meet in the KV pool, so up to tries rounds run.  Return
    the prompts whose tokens differed from solo[prompt] in any round, the
    model's stats after the last round and the number of rounds.
    """
    bad, rounds, st = [], 0, {}
    for rounds in range(1, tries + 1):
        res = gen_many(d, model, prompts, opts)
        bad += [p for p, (t, f) in zip(prompts, res) if t != solo[p]]
        st = json.loads(d.ctl("--json", "stats", model)[1])["models"][0]
        if st["preemptions"] > 0:
            break
    return bad, st, rounds


def models(d):
    """The daemon's models by name, as phasectl --json models gives them."""
    rc, out, err = d.ctl("--json", "models")
    return {m["name"]: m for m in json.loads(out)}


def wait_ready(d, name, timeout=30):
    """Wait until a model (from phased.conf, say) is loaded; whether it is."""
    for _ in range(timeout * 10):
        rc, out, err = d.ctl("--json", "models")
        if rc == 0 and any(m["name"] == name and m.get("state") == "ready"
                           for m in json.loads(out)):
            return True
        time.sleep(0.1)
    return False


def wait_idle(d, name, timeout=30):
    """Wait until a model has no requests and report its KV use."""
    m = None
    for _ in range(timeout * 10):
        m = models(d)[name]
        if m["requests_running"] == 0 and m["requests_waiting"] == 0:
            break
        time.sleep(0.1)
    return m


class UnixHTTP(http.client.HTTPConnection):
    """http.client over a Unix socket."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)
