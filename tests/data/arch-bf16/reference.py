#!/usr/bin/env python3
"""Float64 reference outputs of a small llama-architecture GGUF model whose
matrices are rounded to BF16, with every matrix product's input rounded to
bf16 as well (what bf16-dot does), for tests/unit/test-arch.c.

usage: reference.py MODEL.gguf GOLDEN.json > OUT.json

MODEL is an F32 llama model of ../shared/models/arch; GOLDEN the shared
reference whose cases (prompts and prompt ids) are reused.  Needs numpy.
"""
import json
import struct
import sys

import numpy as np

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
          7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """The metadata (dict) and F32 tensors (name -> array) of a GGUF file."""
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode()
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    if buf[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % path)
    pos = 4
    take("<I")
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take("<Q") for _ in range(take("<I"))]
        ttype, off = take("<I"), take("<Q")
        infos.append((name, ne, ttype, off))
    align = meta.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = {}
    for name, ne, ttype, off in infos:
        if ttype != 0:
            sys.exit("%s: tensor %s is not F32" % (path, name))
        n = int(np.prod(ne))
        a = np.frombuffer(buf, np.float32, n, base + off)
        tensors[name] = a.reshape(list(reversed(ne))).astype(np.float64)
    return meta, tensors


def bf16(x):
    """Round to bf16, nearest even (as f32_to_bf16 and llama.cpp do)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def forward(meta, w, ids):
    """Logits of the last position of ids (float64, bf16 products)."""
    arch = meta["general.architecture"]
    hp = lambda k: meta["%s.%s" % (arch, k)]
    n, nh, nkv = len(ids), hp("attention.head_count"), hp("attention.head_count_kv")
    hd = hp("embedding_length") // nh
    eps = hp("attention.layer_norm_rms_epsilon")
    mm = lambda name, x: bf16(x) @ w[name].T
    inv = hp("rope.freq_base") ** (-np.arange(0, hd, 2) / hd)
    if "rope_freqs.weight" in w:
        inv = inv / w["rope_freqs.weight"]
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(v):
        v = v.reshape(n, -1, hd)
        a, b = v[..., 0::2], v[..., 1::2]
        o = np.empty_like(v)
        o[..., 0::2], o[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return o

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

    x = w["token_embd.weight"][ids]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(hp("block_count")):
        p = "blk.%d." % l
        h = rms(x, w[p + "attn_norm.weight"])
        q, k = rope(mm(p + "attn_q.weight", h)), rope(mm(p + "attn_k.weight", h))
        v = mm(p + "attn_v.weight", h).reshape(n, nkv, hd)
        o = np.empty((n, nh, hd))
        for i in range(nh):
            s = q[:, i] @ k[:, i * nkv // nh].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            o[:, i] = (s / s.sum(-1, keepdims=True)) @ v[:, i * nkv // nh]
        x = x + mm(p + "attn_output.weight", o.reshape(n, -1))
        h = rms(x, w[p + "ffn_norm.weight"])
        g, u = mm(p + "ffn_gate.weight", h), mm(p + "ffn_up.weight", h)
        x = x + mm(p + "ffn_down.weight", g / (1 + np.exp(-g)) * u)
    return mm("output.weight", rms(x, w["output_norm.weight"])[-1:])[0]


def main():
    meta, w = read_gguf(sys.argv[1])
    for name, a in w.items():
        if a.ndim >= 2:
            w[name] = bf16(a)
    eog = meta.get("tokenizer.ggml.eos_token_id")
    golden = json.load(open(sys.argv[2]))
    out = {"model": "%s with its matrices rounded to BF16" % golden["model"],
           "reference": "float64 evaluation, matrix product inputs rounded "
                        "to bf16 (tests/data/arch-bf16/reference.py)",
           "cases": []}
    for c in golden["cases"]:
        ids = list(c["prompt_ids"])
        logits = forward(meta, w, ids)
        greedy, step = [], logits
        while len(greedy) < 32:
            t = int(np.argmax(step))
            greedy.append(t)
            if t == eog:
                break
            ids.append(t)
            step = forward(meta, w, ids)
        out["cases"].append({"prompt": c["prompt"], "prompt_ids": c["prompt_ids"],
                             "greedy": greedy,
                             "last_logits": [float("%.7g" % v) for v in logits]})
    print("{\"model\": %s,\n \"reference\": %s,\n \"cases\": [" %
          (json.dumps(out["model"]), json.dumps(out["reference"])))
    print(",\n".join("  " + json.dumps(c) for c in out["cases"]))
    print(" ]}")


if __name__ == "__main__":
    main()
