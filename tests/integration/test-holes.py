#!/usr/bin/env python3
"""Regression tests for holes found under attack: clients refused at the
connection limit get the error frame (not a reset), error messages never
carry invalid UTF-8, and a prompt that is not valid UTF-8 is refused."""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

d = Daemon(conf="max-connections 2\nmodel s \"%s\" ctx=128 policy=builtin\n"
           % MODEL).start()
for _ in range(300):
    rc, out, err = d.ctl("models")
    if rc == 0 and "ready" in out:
        break
    time.sleep(0.1)

# Invalid UTF-8 in a model name is not echoed raw into the error message.
c = Client(d.sock)
r = c.call(1, GENERATE, generate_body(b"m\xff\xfe", "hi"))
e = error_of(r)
raw = decode(r[R_ERROR][0])[2][0] if e is not None else b""
try:
    raw.decode("utf-8", errors="strict")
    valid = True
except UnicodeDecodeError:
    valid = False
ok(e is not None and valid and "no model m\\xff\\xfe" in e[1],
   "an unknown model's invalid UTF-8 name is escaped in the error", raw)

# A prompt that is not valid UTF-8 is refused, naming the byte.
r = c.call(2, GENERATE, generate_body("s", b"Once \xff upon"))
e = error_of(r)
ok(e is not None and "prompt is not valid UTF-8: byte 0xff at offset 5" in e[1],
   "a prompt that is not valid UTF-8 is refused", e)
r = c.call(3, GENERATE, generate_body("s", "Once upon a time", max_tokens=3))
while r is not None and R_TOKEN in r:
    r = c.recv()
ok(done_reason(r) is not None and done_reason(r)[0] == "length",
   "a valid prompt on the same connection still generates", r)

# At the limit (two connections held) every one of a burst of refused
# clients reads the error frame; none sees a reset.
c2 = Client(d.sock)
ok(R_HELLO in c2.call(1, HELLO, hello_body()), "second connection accepted")
results = []
lock = threading.Lock()


def refused():
    got = None
    try:
        x = Client(d.sock, timeout=10)
        # Write after the daemon has refused us, as a client does that
        # sends its request before reading: that write must not fail.
        time.sleep(0.1)
        x.send(request(1, HELLO, hello_body()))
        got = error_of(x.recv())
        x.close()
    except OSError as ex:
        got = ("oserror", str(ex))
    with lock:
        results.append(got)


threads = [threading.Thread(target=refused) for _ in range(40)]
for t in threads:
    t.start()
for t in threads:
    t.join()
good = [x for x in results if x is not None and x[0] != "oserror"
        and "too many connections (limit 2)" in x[1]]
ok(len(good) == 40, "all 40 refused clients read the too-many-connections "
   "error frame", [x for x in results if x not in good][:5])
ok(R_STATUS in c.call(9, STATUS), "the held connections still work")
c.close()
c2.close()
ok(d.stop() == 0, "daemon exits cleanly")
d.cleanup()
done()
