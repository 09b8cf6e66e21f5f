#!/usr/bin/env python3
"""Integration tests of the daemon's life cycle, socket, access control and
framing (no model needed)."""

import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

# 0755 so that nobody can reach the socket, which is 0660 in group nogroup.
d = Daemon(conf="socket-group nogroup\nmax-frame-size 64K\nmax-connections 300\n",
           dirmode=0o755).start()

# hello and status
rc, out, err = d.ctl("status")
ok(rc == 0 and "phased" in out and "0 models loaded" in out, "status works", out + err)
rc, out, err = d.ctl("--json", "status")
ok(rc == 0 and '"pid":%d' % d.proc.pid in out, "status --json carries the daemon's pid", out + err)
c = Client(d.sock)
r = c.call(1, HELLO, hello_body(1))
ok(r is not None and R_HELLO in r and decode(r[R_HELLO][0])[1][0] == 1,
   "hello returns protocol version 1")
ok(r is not None and r[1][0] == 1, "the reply carries the request id")
r = c.call(7, HELLO, hello_body(99))
e = error_of(r)
ok(e is not None and e[0] == 2 and "protocol version mismatch" in e[1],
   "a protocol version mismatch is a clear error", e)
c.close()
rc, out, err = d.ctl("statu")
ok(rc == 0 and "phased" in out, "unique prefix 'statu' runs status")
rc, out, err = d.ctl("s")
ok(rc == 2 and "ambiguous" in err and "status" in err and "shutdown" in err
   and "stats" in err,
   "ambiguous prefix lists the candidates", err)
rc, out, err = d.ctl("frobnicate")
ok(rc == 2 and "unknown command 'frobnicate'" in err and "status" in err,
   "unknown command lists the valid ones", err)

# access control: an unprivileged peer
rc, out, err = d.ctl("status", user="nobody")
ok(rc == 0 and "phased" in out, "status works for nobody", out + err)
rc, out, err = d.ctl("shutdown", user="nobody")
ok(rc == 1 and "permission denied: shutdown requires admin" in err,
   "shutdown from nobody is refused", (rc, out, err))
rc, out, err = d.ctl("reload", user="nobody")
ok(rc == 1 and "permission denied: reload requires admin" in err,
   "reload from nobody is refused", (rc, err))
ok(d.alive(), "daemon still running after refused admin requests")

# malformed frames: each closes only its own connection
witness = Client(d.sock)
ok(R_HELLO in witness.call(1, HELLO, hello_body()), "witness client says hello")
cases = [
    ("garbage", b"\xde\xad\xbe\xef" * 8, "over the limit"),
    ("length 0", struct.pack(">I", 0), "empty frame"),
    ("length over the limit", struct.pack(">I", 65537) + b"x" * 16, "over the limit of 65536"),
    ("undecodable protobuf", frame(b"\xff\xff\xff\xff\xff"), "undecodable"),
    ("unknown request type", frame(field_varint(1, 5) + field_varint(99, 1)), "unknown request type"),
    ("request id 0", frame(field_varint(1, 0) + field_bytes(2, hello_body())), "request id 0"),
]
for name, data, want in cases:
    bad = Client(d.sock)
    bad.send_raw(data)
    r = bad.recv()
    e = error_of(r)
    ok(e is not None and e[0] == 1 and want in e[1], "%s: error reply" % name, e)
    ok(bad.is_closed(), "%s: connection closed" % name)
    bad.close()
    r = witness.call(2, STATUS)
    ok(r is not None and R_STATUS in r, "%s: witness still served" % name)
# truncated frame: the client half-closes in the middle of a frame
bad = Client(d.sock)
bad.send_raw(struct.pack(">I", 100) + b"\x08\x01")
bad.s.shutdown(socket.SHUT_WR)
e = error_of(bad.recv())
ok(e is not None and "truncated frame" in e[1], "truncated frame: error reply", e)
bad.close()
ok(R_STATUS in witness.call(3, STATUS), "truncated frame: witness still served")
# a frame split across many writes is reassembled
split = Client(d.sock)
msg = frame(request(4, HELLO, hello_body()))
for b in msg:
    split.send_raw(bytes([b]))
    time.sleep(0.001)
r = split.recv()
ok(r is not None and R_HELLO in r, "a frame sent byte by byte is decoded")
split.close()
# cancel of an unknown id
r = witness.call(5, CANCEL, field_varint(1, 12345))
e = error_of(r)
ok(e is not None and "no request 12345" in e[1], "cancel of an unknown id is an error", e)

# 200 concurrent connections
clients = []
try:
    for i in range(200):
        clients.append(Client(d.sock))
    for i, cl in enumerate(clients):
        cl.send(request(i + 1, HELLO, hello_body()))
    good = sum(1 for i, cl in enumerate(clients)
               if (lambda r: r is not None and R_HELLO in r and r[1][0] == i + 1)(cl.recv()))
    ok(good == 200, "200 concurrent connections all answered", good)
    rc, out, err = d.ctl("--json", "status")
    ok('"connections":20' in out, "status counts the open connections", out)
finally:
    for cl in clients:
        cl.close()

# a client that stops reading: bounded memory, others still served
rss0 = d.rss_kb()
slow = Client(d.sock, timeout=0.2)
slow.s.setblocking(False)
msg = frame(request(9, STATUS))
sent = 0
deadline = time.time() + 10
while time.time() < deadline and sent < 200000:
    try:
        slow.s.send(msg)
        sent += 1
    except BlockingIOError:
        time.sleep(0.01)
        # the daemon has stopped taking requests: backpressure works
        try:
            slow.s.send(msg)
            sent += 1
        except BlockingIOError:
            break
    except (BrokenPipeError, ConnectionResetError):
        break
diag("slow reader sent %d requests before being held back" % sent)
ok(sent < 200000, "the daemon stops reading from a client that does not read")
r = witness.call(10, STATUS)
ok(r is not None and R_STATUS in r, "others are served while a client stalls")
rss1 = d.rss_kb()
ok(rss1 - rss0 < 32 * 1024, "daemon memory stays bounded (grew %d KiB)" % (rss1 - rss0))
slow.close()

# SIGHUP with a broken configuration keeps the daemon on the old one
with open(d.conf, "w") as f:
    f.write("socket-group nogroup\nmax-connections lots\n")
d.signal(signal.SIGHUP)
time.sleep(0.5)
ok(d.alive(), "SIGHUP with a broken configuration: still running")
ok("max-connections 'lots' is not an integer" in d.logtext(), "the reload error is logged with the line")
ok(R_STATUS in witness.call(11, STATUS), "still serving after the failed reload")
rc, out, err = d.ctl("reload")
ok(rc == 1 and "phased.conf:2" in err, "phasectl reload reports the bad line", err)
with open(d.conf, "w") as f:
    f.write("socket-group nogroup\nmax-frame-size 64K\nmax-connections 300\n")
rc, out, err = d.ctl("reload")
ok(rc == 0 and "reloaded" in out, "phasectl reload of a good file", out + err)

# a second daemon on the same socket refuses to start
p = subprocess.run([PHASED, "-d", "-s", d.sock], capture_output=True, timeout=10)
ok(p.returncode != 0 and b"another phased is running" in p.stderr,
   "a second daemon on the same socket refuses", p.stderr)
ok(R_STATUS in witness.call(12, STATUS), "the first daemon is unaffected")

# SIGTERM: clients are told, the daemon exits cleanly
d.signal(signal.SIGTERM)
r = witness.recv()
ok(r is not None and R_NOTICE in r and b"shutting down" in r[R_NOTICE][0],
   "clients get a shutting-down notice")
ok(witness.is_closed(), "then the connection is closed")
d.proc.wait(timeout=10)
ok(d.proc.returncode == 0, "the daemon exits 0 after SIGTERM")
ok(not os.path.exists(d.sock), "the socket file is removed")
d.logf.close()

# a stale socket file is replaced
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(d.sock)
s.close()
ok(os.path.exists(d.sock), "a stale socket file exists")
d.start()
rc, out, err = d.ctl("status")
ok(rc == 0, "a daemon starts over a stale socket file")
st = os.stat(d.sock)
ok(oct(st.st_mode & 0o777) == oct(0o660), "the socket is mode 0660", oct(st.st_mode))
import grp  # noqa: E402
ok(st.st_gid == grp.getgrnam("nogroup").gr_gid, "the socket belongs to the configured group")
rc, out, err = d.ctl("shutdown")
ok(rc == 0 and "shutting down" in out, "phasectl shutdown")
d.proc.wait(timeout=10)
ok(d.proc.returncode == 0, "the daemon exits 0 after shutdown")
d.logf.close()

# connection limit
d2 = Daemon(conf="max-connections 2\n").start()
a = Client(d2.sock)
for _ in range(100):
    # wait until the start-up probe's connection is gone
    st = decode(a.call(1, STATUS)[R_STATUS][0])
    if st[4][0] == 1:
        break
    time.sleep(0.05)
b = Client(d2.sock)
b.call(1, HELLO, hello_body())
cl = Client(d2.sock)
e = error_of(cl.recv())
ok(e is not None and e[0] == 7 and "too many connections (limit 2)" in e[1], "the connection limit is an error", e)
a.close(); b.close(); cl.close()
d2.stop()
d2.cleanup()

# phased -n
def check(text):
    path = os.path.join(d.dir, "check.conf")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([PHASED, "-n", "-f", path], capture_output=True, timeout=10)
    return p.returncode, p.stderr.decode()

rc, err = check("# comment\nsocket /tmp/x.sock\nmax-requests 8\nmax-output-buffer 16M\nbf16-dot auto\n"
                "model stories \"/m/stories 260K.gguf\" ctx=512 policy=fcfs\n")
ok(rc == 0 and "configuration OK" in err, "phased -n accepts a good file", err)
for text, want in [
    ("bogus-key 1\n", "check.conf:1: unknown key 'bogus-key'"),
    ("\nmax-connections 0\n", "check.conf:2: max-connections 0 is out of range 1..65536"),
    ("max-frame-size 12Q\n", "invalid size '12Q'"),
    ("socket relative.sock\n", "socket must be an absolute path"),
    ("admin-group no-such-group-xyz\n", "unknown group 'no-such-group-xyz'"),
    ("model a /x\nmodel a /y\n", "model a already defined at line 1"),
    ("model a /x ctx\n", "model option 'ctx' is not key=value"),
    ("socket \"/tmp/x\n", "unterminated quoted string"),
    ("default-policy ../evil\n", "default-policy: policy name '../evil' contains '/'"),
    ("model m /x ctx=5\n", "check.conf:1: model m: ctx 5 is out of range 16..16777216"),
    ("bf16-dot maybe\n", "check.conf:1: bf16-dot 'maybe' is not yes, no or auto"),
    ("max-output-buffer 1K\n", "check.conf:1: max-output-buffer 1K is out of range 64K..4G"),
    ("max-frame-size 512\n", "check.conf:1: max-frame-size 512 is out of range 1K..256M"),
    ("threads 2000\n", "check.conf:1: threads 2000 is out of range 0..1024"),
    ("pidfile 1 2\n", "check.conf:1: pidfile takes exactly one value"),
    ("model m /x groups=gpu:cpu0\n", "unknown role 'gpu'"),
    ("user-weight no-such-user-xyz 2\n", "check.conf:1: user-weight: unknown user 'no-such-user-xyz'"),
    ("user-weight nobody 0\n", "check.conf:1: user-weight 0 is out of range 1..1000"),
    ("user-weight nobody\n", "check.conf:1: user-weight takes a user and a weight"),
]:
    rc, err = check(text)
    ok(rc == 1 and want in err, "phased -n rejects: %s" % want, err)
p = subprocess.run([PHASED, "-n", "-f", "/nonexistent/phased.conf"], capture_output=True)
ok(p.returncode == 1 and b"No such file" in p.stderr, "phased -n on a missing file")

d.cleanup()
done()
