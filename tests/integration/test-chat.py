#!/usr/bin/env python3
"""Chat through the daemon: a stories260K copy given a ChatML template and
<|im_start|>/<|im_end|> control tokens (two of its pieces renamed), chats
that end at <|im_end|> with reason stop, the template option, render,
tokenize and detokenize, and log probabilities of greedy tokens."""

import json
import math
import os
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403
import phasedtest  # noqa: E402

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + "
          "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
TYPE_CONTROL = 3


# A GGUF rewriter: enough of the format to rename tokens and add a key.
def _str(buf, i):
    n = struct.unpack_from("<Q", buf, i)[0]
    return buf[i + 8:i + 8 + n], i + 8 + n


SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B",
          10: "Q", 11: "q", 12: "d"}


def _value(buf, i, t):
    """Parse one value of type t at i: (python value, next offset)."""
    if t == 8:
        return _str(buf, i)
    if t == 9:
        et, n = struct.unpack_from("<IQ", buf, i)
        i += 12
        out = []
        for _ in range(n):
            v, i = _value(buf, i, et)
            out.append(v)
        return (et, out), i
    f = "<" + SCALAR[t]
    return struct.unpack_from(f, buf, i)[0], i + struct.calcsize(f)


def _enc(t, v):
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_enc(et, x) for x in items)
    return struct.pack("<" + SCALAR[t], v)


def rewrite_gguf(src, dst, rename, extra):
    """Copy src to dst with tokens renamed ({id: (text, type)}) and extra
    string keys added."""
    buf = open(src, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", buf, 0)
    i = 24
    kvs = []
    for _ in range(n_kv):
        k, i = _str(buf, i)
        t = struct.unpack_from("<I", buf, i)[0]
        v, i = _value(buf, i + 4, t)
        kvs.append([k, t, v])
    tinfo_start = i
    for _ in range(n_tensors):
        _, i = _str(buf, i)
        nd = struct.unpack_from("<I", buf, i)[0]
        i += 4 + 8 * nd + 4 + 8
    tinfo = buf[tinfo_start:i]
    align = 32
    for k, t, v in kvs:
        if k == b"general.alignment":
            align = v
    data_start = (i + align - 1) // align * align
    for kv in kvs:
        if kv[0] == b"tokenizer.ggml.tokens":
            for tid, (text, _) in rename.items():
                kv[2][1][tid] = text.encode()
        if kv[0] == b"tokenizer.ggml.token_type":
            for tid, (_, ty) in rename.items():
                kv[2][1][tid] = ty
    for k, v in extra.items():
        kvs.append([k.encode(), 8, v.encode()])
    out = struct.pack("<IIQQ", magic, version, n_tensors, len(kvs))
    for k, t, v in kvs:
        out += _enc(8, k) + struct.pack("<I", t) + _enc(t, v)
    out += tinfo
    out += b"\0" * ((-len(out)) % align)
    out += buf[data_start:]
    open(dst, "wb").write(out)


def tokens_of(out):
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    return [x for x in lines if "token_id" in x], (lines[-1] if lines and "finish_reason" in lines[-1] else None)


tmp = tempfile.mkdtemp(prefix="phased-chat-")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
d = Daemon(conf="plugin-dir %s\n" % PLUGINS).start()
try:
    # Two pieces the prompt below never uses stand in for the markers.
    IM_START, IM_END = 510, 511
    first = os.path.join(tmp, "chatml-a.gguf")
    rewrite_gguf(MODEL, first, {IM_START: ("<|im_start|>", TYPE_CONTROL),
                                IM_END: ("<|im_end|>", TYPE_CONTROL)},
                 {"tokenizer.chat_template": CHATML})
    rc, out, err = d.ctl("load", "a", first, "ctx=256", "kv=f32")
    ok(rc == 0, "load the ChatML copy of stories260K", err)
    rc, out, err = d.ctl("--json", "models")
    models = json.loads(out) if rc == 0 else []
    ok(models and models[0].get("chat_template") == "chatml",
       "models shows the detected template chatml", out)
    rc, out, _ = d.ctl("models")
    ok("template chatml" in out, "models in text shows it too", out)
    like = "Lily went to the park"
    rc, out, err = d.ctl("--json", "render", "a", "--system", "Be kind", like)
    rnd = json.loads(out) if rc == 0 else {}
    ok(rnd.get("text") == "<|im_start|>system\nBe kind<|im_end|>\n"
       "<|im_start|>user\n" + like + "<|im_end|>\n<|im_start|>assistant\n",
       "render gives the ChatML text", out + err)
    # No messages and no generation prompt: "" (the reply once carried
    # whatever the heap held after the render's reserved buffer).
    for _ in range(3):
        c = Client(d.sock)
        r = c.call(7, 34, field_bytes(1, "a") + field_varint(3, 0))
        c.close()
        txt = decode(r[34][0]).get(1, [None])[0] if r and 34 in r else None
        if txt != b"":
            break
    ok(txt == b"", "render of no messages without the generation prompt "
       "is the empty text", repr(r))
    ptoks = rnd.get("tokens", [])
    ok(ptoks[:1] == [1] and ptoks.count(1) == 1,
       "rendered prompt starts with exactly one BOS", str(ptoks[:4]))
    ok(ptoks.count(IM_START) == 3 and ptoks.count(IM_END) == 2,
       "markers are parsed as their special tokens", str(ptoks))

    # What the model says greedily, with the end of turn far away.
    rc, out, err = d.ctl("--json", "chat", "a", "--system", "Be kind", "-m",
                         like, "--max-tokens", "12")
    toks, final = tokens_of(out)
    ids = [t["token_id"] for t in toks]
    ok(rc == 0 and final and final["finish_reason"] == "length" and len(ids) == 12,
       "a greedy chat runs to max_tokens", out + err)
    # Pick the fourth answer token as the end of turn in a second copy.
    k = next((j for j in range(3, len(ids))
              if ids[j] not in ids[:j] and ids[j] not in ptoks and ids[j] > 2), None)
    if not ok(k is not None, "an answer token to turn into <|im_end|>", str(ids)):
        raise SystemExit(done())
    second = os.path.join(tmp, "chatml-b.gguf")
    rewrite_gguf(MODEL, second, {IM_START: ("<|im_start|>", TYPE_CONTROL),
                                 ids[k]: ("<|im_end|>", TYPE_CONTROL)},
                 {"tokenizer.chat_template": CHATML})
    rc, out, err = d.ctl("load", "b", second, "ctx=256", "kv=f32")
    ok(rc == 0, "load the copy whose <|im_end|> the model says", err)
    rc, out, err = d.ctl("--json", "render", "b", "--system", "Be kind", like)
    ok(rc == 0 and json.loads(out)["tokens"] == [ids[k] if t == IM_END else t for t in ptoks],
       "the same prompt tokens, <|im_end|> renumbered", out + err)
    rc, out, err = d.ctl("--json", "chat", "b", "--system", "Be kind", "-m",
                         like, "--max-tokens", "12")
    toks, final = tokens_of(out)
    got = [t["token_id"] for t in toks]
    ok(rc == 0 and final and final["finish_reason"] == "stop",
       "the chat ends at <|im_end|> with reason stop", out + err)
    ok(got == ids[:k + 1], "after the same tokens, <|im_end|> last",
       "%s vs %s" % (got, ids[:k + 1]))
    ok(toks and toks[-1]["text"] == "" and
       "<|im_end|>" not in "".join(t["text"] for t in toks),
       "<|im_end|> is not printed", out)
    rc, text, err = d.ctl("chat", "b", "--system", "Be kind", "-m", like,
                          "--max-tokens", "12")
    ok(rc == 0 and text == "".join(t["text"] for t in toks) + "\n",
       "text output is the answer", repr(text))
    # A raw generate of the same prompt tokens ends there too, as eos.
    c = Client(d.sock)
    c.call(1, 2, hello_body())
    body = generate_body("b", "", max_tokens=12) + b"".join(
        field_varint(13, ids[k] if t == IM_END else t) for t in ptoks)
    c.send(request(2, 30, body))
    n_tok, reason = 0, None
    while reason is None:
        r = c.recv()
        if r is None:
            break
        n_tok += R_TOKEN in r
        reason = done_reason(r)
    c.close()
    ok(reason and reason[0] == "eos" and n_tok == k + 1,
       "generate of the same prompt tokens stops there as eos", str(reason))

    # Interactive: two turns on stdin, history kept.
    rc, out, err = d.ctl("chat", "b", "--max-tokens", "4",
                         input=b"Hello\nTell me more\n")
    ok(rc == 0 and out.count("\n") == 2, "chat reads one turn per line", out + err)

    # Ctrl-C cancels the running answer and the conversation goes on.
    p = subprocess.Popen([PHASECTL, "-s", d.sock, "chat", "a", "--max-tokens",
                          "200", "--temp", "1", "--seed", "5"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdin.write(b"Hello\n")
    p.stdin.flush()
    first = p.stdout.read(1)
    p.send_signal(signal.SIGINT)
    p.stdin.write(b"Again\n")
    p.stdin.close()
    rest, perr = p.stdout.read(), p.stderr.read()
    p.wait(timeout=60)
    rc, sout, _ = d.ctl("--json", "stats", "a")
    cnt = json.loads(sout)["models"][0]["counters"] if rc == 0 else {}
    ok(p.returncode == 0 and first and cnt.get("finished_cancelled") == 1
       and sum(v for k, v in cnt.items() if k.startswith("finished_")) == 3,
       "SIGINT cancels the answer and phasectl chat goes on",
       "%r %r %s" % (rest[-200:], perr, sout))

    # Log probabilities of greedy tokens are the top of their lists.
    rc, out, err = d.ctl("--json", "generate", "a", "--max-tokens", "8",
                         "--logprobs", "5", "Once upon a time")
    toks, final = tokens_of(out)
    good = len(toks) == 8
    for t in toks:
        tl = t.get("top_logprobs", [])
        lps = [x["logprob"] for x in tl]
        good = good and len(tl) == 5 and tl[0]["token_id"] == t["token_id"] \
            and abs(tl[0]["logprob"] - t["logprob"]) < 1e-6 \
            and t["logprob"] == max(lps) and lps == sorted(lps, reverse=True) \
            and t["logprob"] <= 0 and sum(math.exp(x) for x in lps) <= 1.0001
    ok(rc == 0 and good, "greedy logprobs are the maximum of their top 5", out + err)
    rc, out, err = d.ctl("--json", "chat", "a", "-m", "Hi", "--max-tokens", "3",
                         "--logprobs", "20")
    toks, _ = tokens_of(out)
    ok(rc == 0 and all(len(t["top_logprobs"]) == 20 for t in toks),
       "chat gives 20 alternatives", out + err)
    rc, out, err = d.ctl("generate", "a", "--logprobs", "21", "x")
    ok(rc == 1 and "top_logprobs 21 is over the limit of 20" in err,
       "21 alternatives are refused", err)
    rc, out, err = d.ctl("generate", "a", "--temp", "0.8", "--seed", "3",
                         "--max-tokens", "4", "--logprobs", "0", "x")
    ok(rc == 0 and len([x for x in out.splitlines() if x.strip()]) == 4,
       "--logprobs 0 prints one line per token", out + err)

    # The template option, and refusals.
    rc, out, err = d.ctl("load", "c", MODEL, "ctx=128", "template=gemma")
    ok(rc == 0, "load with template=gemma", err)
    rc, out, err = d.ctl("render", "c", "--system", "S", "Hi")
    ok(rc == 0 and out == "<start_of_turn>user\nS\n\nHi<end_of_turn>\n"
       "<start_of_turn>model\n", "template= overrides (stories260K has none)",
       repr(out))
    rc, out, err = d.ctl("load", "e", MODEL, "template=jinja2")
    ok(rc == 1 and "template 'jinja2' is not one of chatml, llama3" in err,
       "an unknown template is refused by name", err)
    rc, out, err = d.ctl("load", "f", MODEL, "ctx=128")
    rc, out, err = d.ctl("--json", "models")
    info = {m["name"]: m for m in json.loads(out)}
    ok(info["f"]["chat_template"] == "chatml" and info["c"]["chat_template"] == "gemma",
       "no template in the file: chatml", out)
    c = Client(d.sock)
    c.call(1, 2, hello_body())
    body = field_bytes(1, "a") + field_bytes(2, field_bytes(1, "tool") + field_bytes(2, "x"))
    r = c.call(2, 31, body)
    ok(error_of(r) and "message 1 has role \"tool\"" in error_of(r)[1],
       "a chat with an unknown role is refused", str(r))
    r = c.call(3, 31, field_bytes(1, "a"))
    ok(error_of(r) and "chat has no messages" in error_of(r)[1],
       "a chat without messages is refused", str(r))

    # Tokenize and detokenize through the daemon.
    r = c.call(4, 32, field_bytes(1, "a") + field_bytes(2, "Once upon a time"))
    tk = decode(r[32][0]) if 32 in r else {}
    ids = [_ for _ in tk.get(1, [])]
    if ids and isinstance(ids[0], bytes):  # packed
        raw, ids, j = ids[0], [], 0
        while j < len(raw):
            v, j = phasedtest._read_varint(raw, j)
            ids.append(v)
    golden = json.load(open(os.path.join(SHARED, "golden",
                                         "stories260K-once-upon-a-time.json")))
    want = golden.get("prompt_tokens") or golden.get("prompt_ids")
    ok(ids == want, "tokenize gives the golden prompt ids", "%s vs %s" % (ids, want))
    body = field_bytes(1, "a") + b"".join(field_varint(2, x) for x in ids)
    r = c.call(5, 33, body)
    dt = decode(r[33][0]) if 33 in r else {}
    ok(dt.get(1, [b""])[0] == b"Once upon a time", "detokenize gives the text back", str(r))
    r = c.call(6, 33, field_bytes(1, "a") + field_varint(2, 99999))
    ok(error_of(r) and "token 99999 at position 0 is out of range 0..511" in error_of(r)[1],
       "detokenize refuses an id out of range", str(r))
    c.close()
    ok(d.alive(), "the daemon is still serving")
finally:
    d.stop()
    d.cleanup()
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
done()
