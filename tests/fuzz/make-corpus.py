#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora under tests/fuzz/corpus/TARGET:
request frames as phasectl sends them and JSON bodies of the OpenAI and
Ollama endpoints; with --gguf DIR, small GGUF files (an SPM and a
byte-level BPE vocabulary, a tensor of each common type, a few hostile
headers) into DIR, as the build does.  Run it from anywhere; it rewrites
the files it owns and leaves other files (crashing inputs added as
regressions) alone."""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from phasedtest import (field_bytes as fb, field_float as ff,  # noqa: E402
                        field_varint as fv, frame, request as req, varint)
CORPUS = os.path.join(HERE, "corpus")

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
           F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return (struct.pack("<IQ", et, len(items)) +
                b"".join(gval(et, x) for x in items))
    return struct.pack(fmt[t], v)


def gguf(kvs, tensors=(), version=3, align=32):
    """kvs: (key, type, value); tensors: (name, dims, ggml type, data)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    off = 0
    infos, blobs = b"", b""
    for name, dims, tt, data in tensors:
        infos += gstr(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", tt, off)
        pad = (-len(data)) % align
        blobs += data + b"\0" * pad
        off += len(data) + pad
    out += infos
    out += b"\0" * ((-len(out)) % align)
    return out + blobs


def spm_vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    words = ["\u2581", "\u2581Once", "\u2581upon", "\u2581a", "\u2581time",
             "\u2581the", "e", "t", "a", "o", "n", "\u2581t", "he", "in",
             "\u00e9", "\u2581\u00e9t\u00e9", "<|im_start|>", "<|im_end|>"]
    toks += words
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(words) - 2) + [3, 3]
    return [
        ("general.architecture", STR, "llama"),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, toks)),
        ("tokenizer.ggml.scores", ARR, (F32, scores)),
        ("tokenizer.ggml.token_type", ARR, (I32, types)),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
        ("tokenizer.ggml.add_bos_token", BOOL, 1),
        ("tokenizer.chat_template", STR,
         "{% for m in messages %}<|im_start|>{{ m.role }}\n"
         "{{ m.content }}<|im_end|>\n{% endfor %}"),
    ]


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) +
          list(range(ord("\xa1"), ord("\xac") + 1)) +
          list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_vocab(pre="gpt2"):
    m = bytes_to_unicode()
    toks = [m[b] for b in range(256)]
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a", "o n"]
    for mg in merges:
        toks.append(mg.replace(" ", ""))
    toks += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * (len(toks) - 3) + [3, 3, 3]
    return [
        ("general.architecture", STR, "qwen2"),
        ("tokenizer.ggml.model", STR, "gpt2"),
        ("tokenizer.ggml.pre", STR, pre),
        ("tokenizer.ggml.tokens", ARR, (STR, toks)),
        ("tokenizer.ggml.token_type", ARR, (I32, types)),
        ("tokenizer.ggml.merges", ARR, (STR, merges)),
        ("tokenizer.ggml.bos_token_id", U32, len(toks) - 3),
        ("tokenizer.ggml.eos_token_id", U32, len(toks) - 3),
        ("tokenizer.ggml.add_bos_token", BOOL, 0),
    ]


def gguf_corpus():
    f32 = struct.pack("<8f", *[0.5 * i for i in range(8)])
    f16 = struct.pack("<8e", *[0.25 * i for i in range(8)])
    q8_0 = struct.pack("<e", 0.1) + bytes(range(32))          # 32 values
    q4_0 = struct.pack("<e", 0.1) + bytes(range(16))          # 32 values
    scalars = [("s.u8", U8, 7), ("s.i8", I8, -7), ("s.u16", U16, 700),
               ("s.i16", I16, -700), ("s.u32", U32, 70000),
               ("s.i32", I32, -70000), ("s.f32", F32, 1.5),
               ("s.bool", BOOL, 1), ("s.str", STR, "text \u00e9"),
               ("s.u64", U64, 1 << 40), ("s.i64", I64, -(1 << 40)),
               ("s.f64", F64, 2.5), ("s.arr", ARR, (U32, [1, 2, 3])),
               ("general.alignment", U32, 32)]
    files = {
        "spm-vocab.gguf": gguf(spm_vocab()),
        "bpe-vocab.gguf": gguf(bpe_vocab()),
        "bpe-llama3.gguf": gguf(bpe_vocab("llama-bpe")),
        "scalars.gguf": gguf(scalars),
        "tensors.gguf": gguf([("general.architecture", STR, "llama")], [
            ("f32", [8], 0, f32), ("f16", [4, 2], 1, f16),
            ("q8_0", [32], 8, q8_0), ("q4_0", [32, 1], 2, q4_0)]),
        "v2.gguf": gguf(scalars[:3], version=2),
        "align64.gguf": gguf([("general.alignment", U32, 64)],
                             [("t", [8], 0, f32)], align=64),
        "empty.gguf": gguf([]),
        "bad-magic.gguf": b"GGUG" + gguf([])[4:],
        "bad-version.gguf": gguf([], version=9),
        "huge-count.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 60),
        "truncated.gguf": gguf(spm_vocab())[:200],
    }
    return files



def frame_corpus():
    hello = req(1, 2, fv(1, 1))
    gen = req(2, 30, fb(1, "stories") + fb(2, "Once upon a time") +
              fv(3, 40) + ff(4, 0.0) + fb(10, "\n\n") + fv(15, 1) +
              fv(16, 3))
    gen_tokens = req(3, 30, fb(1, "stories") + fb(2, "") +
                     fb(13, b"".join(varint(t) for t in (1, 400, 30, 5))))
    gen_bad_utf8 = req(4, 30, fb(1, b"st\xffries") + fb(2, b"ab\xc3(\xfe"))
    gen_stops = req(5, 30, fb(1, "m") + fb(2, "p") +
                    b"".join(fb(10, "s%d" % i) for i in range(20)) +
                    fb(10, ""))
    msgs = (fb(2, fb(1, "system") + fb(2, "You are terse.")) +
            fb(2, fb(1, "user") + fb(2, "Hi \u00e9")) +
            fb(2, fb(1, "assistant") + fb(2, "Hello")))
    chat = req(6, 31, fb(1, "stories") + msgs + fv(3, 10) + fv(16, 2))
    chat_badrole = req(7, 31, fb(1, "m") + fb(2, fb(1, "wizard") +
                                                fb(2, "x")))
    render = req(8, 34, fb(1, "m") + msgs + fv(3, 0))
    tok = req(9, 32, fb(1, "m") + fb(2, b"hello <s> \xff") + fv(4, 1))
    detok = req(10, 33, fb(1, "m") + fb(2, b"".join(varint(t) for t in
                                                   (1, 2, 3))))
    load = req(11, 20, fb(1, "a") + fb(2, "/nonexistent.gguf") +
               fb(3, "ctx=256") + fb(3, "policy=chunked-prefill") +
               fb(3, "policy.chunk=64") + fb(3, "groups=g1:cpu:0-1:mixed") +
               fb(3, "keep-alive=5m") + fb(3, "kv=f16"))
    load_bad = req(12, 20, fb(1, "a") + fb(2, "x") + fb(3, "ctx=-1") +
                   fb(3, "=x") + fb(3, "nokey"))
    pset = req(13, 42, fb(1, "a") + fb(2, "decode-reserved") +
               fb(3, "reserve=2"))
    status = req(14, 10)
    models = req(15, 22)
    stats = req(16, 50, fb(1, "a"))
    cancel = req(17, 3, fv(1, 2))
    files = {
        "hello-generate.frame": frame(hello) + frame(gen),
        "generate-tokens.frame": frame(gen_tokens),
        "generate-bad-utf8.frame": frame(gen_bad_utf8),
        "generate-stops.frame": frame(gen_stops),
        "chat.frame": frame(hello) + frame(chat),
        "chat-bad-role.frame": frame(chat_badrole),
        "render.frame": frame(render),
        "tokenize-detokenize.frame": frame(tok) + frame(detok),
        "load.frame": frame(load) + frame(load_bad),
        "policy-set.frame": frame(pset),
        "admin.frame": frame(status) + frame(models) + frame(stats) +
                     frame(cancel),
        "empty-frame.frame": b"\0\0\0\0",
        "oversized.frame": b"\x7f\xff\xff\xff",
        "id-zero.frame": frame(req(0, 10)),
        "undecodable.frame": frame(b"\xff\xff\xff"),
        "unknown-body.frame": frame(fv(1, 5) + fb(99, b"")),
        "partial.frame": frame(gen)[:-3],
    }
    return files


def http_corpus():
    bodies = {
        "oai-completion.json": {"model": "stories", "prompt": "Once upon",
                                "max_tokens": 16, "temperature": 0,
                                "stop": ["\n", "."], "seed": 7,
                                "logprobs": 2, "echo": True},
        "oai-completion-tokens.json": {"model": "m", "prompt": [1, 2, 3],
                                       "stream": True,
                                       "stream_options":
                                       {"include_usage": True}},
        "oai-chat.json": {"model": "stories", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "max_completion_tokens": 8, "top_p": 0.9, "top_k": 40,
            "logprobs": True, "top_logprobs": 3,
            "response_format": {"type": "text"}},
        "oai-refused.json": {"model": "m", "prompt": "x", "n": 2,
                             "presence_penalty": 1, "logit_bias": {"1": 2},
                             "tools": [{}], "suffix": "y"},
        "ollama-generate.json": {"model": "stories", "prompt": "Hello",
                                 "system": "sys", "stream": False,
                                 "keep_alive": "5m", "context": [1, 5, 9],
                                 "options": {"temperature": 0.5,
                                             "num_predict": 20,
                                             "stop": ["x"], "seed": 1,
                                             "repeat_penalty": 1.1}},
        "ollama-chat.json": {"model": "stories", "messages": [
            {"role": "user", "content": "Hi"}], "keep_alive": -1,
            "format": "", "images": [], "tools": []},
        "ollama-load.json": {"model": "stories", "keep_alive": 0},
    }
    files = {k: json.dumps(v).encode() for k, v in bodies.items()}
    files["not-object.json"] = b"[1, 2, 3]"
    files["bad-json.json"] = b'{"model": "m", "prompt": '
    files["duplicate-key.json"] = b'{"model": "a", "model": "b"}'
    files["nul-prompt.json"] = b'{"model": "m", "prompt": "a\\u0000b"}'
    files["bad-utf8.json"] = b'{"model": "\xff", "prompt": "x"}'
    return files


def write(target, files):
    d = os.path.join(CORPUS, target)   # an absolute target stays as it is
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


# The GGUF seeds are model files: they are written where the build asks
# (make-corpus.py --gguf DIR), never kept in the tree.
if len(sys.argv) == 3 and sys.argv[1] == "--gguf":
    write(sys.argv[2], gguf_corpus())
elif len(sys.argv) == 1:
    write("fuzz-frame", frame_corpus())
    write("fuzz-http", http_corpus())
else:
    sys.exit("usage: make-corpus.py [--gguf DIR]")
