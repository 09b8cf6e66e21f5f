#!/usr/bin/env python3
"""The HTTP front end on stories260K: OpenAI and Ollama endpoints, raw SSE
and NDJSON framing, errors, lazy loading and keep-alive, access, and hostile
clients (malformed requests, huge headers and bodies, slowloris, a thousand
idle connections) while a witness request is still served."""

import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasedtest import *  # noqa: E402,F403

MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
GOLDEN = os.path.join(SHARED, "golden", "stories260K-once-upon-a-time.json")
PLUGINS = os.path.join(BUILD, "policies", ".libs")
if not os.path.exists(MODEL):
    skip_all("no %s" % MODEL)
golden = json.load(open(GOLDEN))
KEY = "test-key-0123456789abcdef"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def call(target, method, path, body=None, headers=None, raw_body=None):
    """One request; returns (status, headers dict, body bytes)."""
    if isinstance(target, int):
        c = http.client.HTTPConnection("127.0.0.1", target, timeout=30)
    else:
        c = UnixHTTP(target)
    data = raw_body if raw_body is not None else (
        json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, out


def jcall(target, method, path, body=None, **kw):
    st, hd, out = call(target, method, path, body, **kw)
    try:
        return st, hd, json.loads(out)
    except ValueError:
        return st, hd, out


def sse_events(raw):
    """Split an SSE body into its data payloads; None if framing is off."""
    text = raw.decode()
    if not text.endswith("\n\n"):
        return None
    out = []
    for block in text[:-2].split("\n\n"):
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            if not line.startswith("data: "):
                return None
            out.append(line[6:])
    return out


def raw_exchange(port, data, timeout=10):
    """Send raw bytes over TCP; return what comes back until close."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


def status_of(raw):
    try:
        return int(raw.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


port = free_port()
d = Daemon("plugin-dir %s\n"
           "model stories %s ctx=512\n"
           "model lazy %s ctx=256 load=lazy keep-alive=1s\n"
           "http-listen 127.0.0.1:%d\n"
           "http-api-key %s\n"
           "http-timeout 2\n"
           "http-max-body 64K\n" % (PLUGINS, MODEL, MODEL, port, KEY))
d.start()
HS = os.path.join(d.dir, "phased-http.sock")
for _ in range(200):
    st, _, h = jcall(HS, "GET", "/health")
    if st == 200 and h["models"].get("stories") == "ready":
        break
    time.sleep(0.05)
AUTH = {"Authorization": "Bearer " + KEY}

try:
    # --- basics ------------------------------------------------------------
    ok(os.path.exists(HS), "HTTP socket beside the protobuf socket")
    st, _, h = jcall(HS, "GET", "/health")
    ok(st == 200 and h["status"] == "ok", "GET /health", h)
    st, _, m = jcall(HS, "GET", "/v1/models")
    ids = {x["id"]: x.get("status") for x in m.get("data", [])}
    ok(st == 200 and m["object"] == "list" and ids.get("stories") == "loaded"
       and ids.get("lazy") == "unloaded", "GET /v1/models lists loaded and "
       "lazy models", m)

    # --- /v1/completions ---------------------------------------------------
    n = 24
    st, _, r = jcall(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": golden["prompt_tokens"], "max_tokens": n,
        "temperature": 0})
    ok(st == 200 and r["object"] == "text_completion" and
       r["usage"]["prompt_tokens"] == len(golden["prompt_tokens"]) and
       r["usage"]["completion_tokens"] == n and
       r["usage"]["total_tokens"] == len(golden["prompt_tokens"]) + n and
       r["choices"][0]["finish_reason"] == "length" and
       r["id"].startswith("cmpl-") and r["model"] == "stories" and
       "ttft_ms" in r["timings"], "completion from token ids: usage, "
       "finish_reason, id, timings", r)
    greedy_text = r["choices"][0]["text"]

    st, _, og = jcall(HS, "POST", "/api/generate", {
        "model": "stories", "prompt": "", "context": golden["prompt_tokens"],
        "stream": False, "raw": True,
        "options": {"num_predict": n, "temperature": 0}})
    ctx = og.get("context", [])
    ok(st == 200 and ctx[len(golden["prompt_tokens"]):] ==
       golden["greedy_tokens"][:n], "greedy tokens over HTTP match the golden "
       "reference", og)

    st, _, r2 = jcall(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": "Once upon a time", "max_tokens": n,
        "temperature": 0, "user": "someone", "n": 1})
    ok(st == 200 and r2["choices"][0]["text"] == greedy_text,
       "text prompt gives the same text as its token ids", r2)

    st, hd, raw = call(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": "Once upon a time", "max_tokens": n,
        "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    ev = sse_events(raw)
    ok(st == 200 and hd.get("content-type") == "text/event-stream" and
       ev is not None and ev[-1] == "[DONE]", "stream: SSE framing ends "
       "with data: [DONE]", raw[-300:])
    chunks = [json.loads(e) for e in (ev or [])[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    fin = [c for c in chunks if c["choices"] and
           c["choices"][0]["finish_reason"] is not None]
    usage = [c for c in chunks if c.get("usage")]
    ok(text == greedy_text, "stream: deltas add up to the whole text",
       "%r vs %r" % (text, greedy_text))
    ok(len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] == "length"
       and chunks.index(fin[0]) == len(chunks) - 2, "stream: one final "
       "chunk with finish_reason before the usage chunk", chunks[-3:])
    ok(len(usage) == 1 and usage[0]["choices"] == [] and
       usage[0]["usage"]["completion_tokens"] == n and
       all(c["usage"] is None for c in chunks[:-1]),
       "stream_options.include_usage adds one usage chunk", usage)

    stop = greedy_text.split()[3]
    st, _, r = jcall(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": "Once upon a time", "max_tokens": n,
        "temperature": 0, "stop": [" " + stop]})
    ok(st == 200 and r["choices"][0]["finish_reason"] == "stop" and
       greedy_text.startswith(r["choices"][0]["text"]) and
       not r["choices"][0]["text"].endswith(" " + stop) and
       len(r["choices"][0]["text"]) < len(greedy_text), "stop as an array ends the text "
       "before it", r)
    st, _, r = jcall(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": "Once upon a time", "max_tokens": 4,
        "temperature": 0.8, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "seed": 7, "repetition_penalty": 1.1, "stop": "zzz",
        "presence_penalty": 0, "frequency_penalty": 0})
    ok(st == 200 and r["usage"]["completion_tokens"] == 4,
       "sampling fields are accepted", r)
    st, _, r = jcall(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": "Once upon a time", "max_tokens": 3,
        "echo": True, "temperature": 0})
    ok(st == 200 and r["choices"][0]["text"].startswith("Once upon a time"),
       "echo puts the prompt first", r)

    # --- errors ------------------------------------------------------------
    def err(body, path="/v1/completions", target=HS, method="POST", **kw):
        st, hd, r = jcall(target, method, path, body, **kw)
        msg = r.get("error", {}) if isinstance(r, dict) else {}
        if isinstance(msg, dict):
            msg = msg.get("message", "")
        return st, msg, r, hd

    base = {"model": "stories", "prompt": "Hi"}
    cases = [
        (dict(base, max_tokens="ten"), 400, "max_tokens"),
        (dict(base, max_tokens=-1), 400, "max_tokens"),
        (dict(base, temperature=1e9), 400, "temperature"),
        (dict(base, top_p=[1]), 400, "top_p"),
        (dict(base, stream="yes"), 400, "stream"),
        (dict(base, n=3), 400, "'n'"),
        (dict(base, presence_penalty=0.5), 400, "presence_penalty"),
        (dict(base, stop=[1, 2]), 400, "stop"),
        (dict(base, stop=["x"] * 20), 400, "stop"),
        (dict(base, prompt=["a", "b"]), 400, "prompt"),
        (dict(base, prompt=[1, -5]), 400, "prompt"),
        (dict(base, prompt=[1, 99999]), 400, "out of range"),
        ({"prompt": "Hi"}, 400, "model"),
        (dict(base, model="nosuch"), 404, "nosuch"),
    ]
    for body, want, word in cases:
        st, msg, r, _ = err(body)
        ok(st == want and word in msg, "%d naming %s: %s" %
           (want, word, json.dumps(body)[:60]), (st, r))
    st, msg, r, _ = err(dict(base, model="nosuch"))
    ok(r.get("error", {}).get("code") == "model_not_found" and
       r["error"].get("type") == "not_found_error", "404 carries OpenAI's "
       "error type and code", r)
    for raw, word, desc in [
            (b"{not json", "not valid JSON", "invalid JSON"),
            (b"", "empty", "empty body"),
            (b"[1,2]", "JSON object", "a JSON array body"),
            (b'{"model": "stories", "model": "x"}', "duplicate",
             "duplicate keys"),
            (b'{"model": "stories", "prompt": "\xff\xfe"}', "JSON",
             "invalid UTF-8"),
            (b"[" * 30000 + b"]" * 30000, "JSON", "JSON nested 30000 "
             "deep")]:
        st, _, out = call(HS, "POST", "/v1/completions", raw_body=raw)
        ok(st == 400 and word.encode() in out, "400 for %s" % desc, out[:200])
    out = raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 70000\r\n\r\n" + b"a" * 1000)
    ok(status_of(out) == 413, "413 for a body over http-max-body", out[:100])
    st, msg, r, _ = err(None, path="/v1/completions", method="GET")
    ok(st == 405, "405 for the wrong method", r)
    st, msg, r, _ = err(None, path="/v2/nothing", method="GET")
    ok(st == 404 and "/v2/nothing" in msg, "404 for an unknown path", r)
    st, msg, r, _ = err({"model": "stories", "messages": [{"role": "user"}],
                         "stream": 1}, path="/v1/chat/completions")
    ok(st == 400 and "stream" in msg, "chat: 400 naming stream", r)
    st, msg, r, _ = err({"model": "stories", "messages": "hi"},
                        path="/v1/chat/completions")
    ok(st == 400 and "messages" in msg, "chat: 400 naming messages", r)
    st, msg, r, _ = err({"model": "stories", "prompt": "x", "logprobs": 21})
    ok(st == 400 and "logprobs" in msg, "400 naming logprobs over 20", r)
    st, msg, r, _ = err({"model": "stories", "messages": [
        {"role": "user", "content": "Hi"}], "top_logprobs": 2},
        path="/v1/chat/completions")
    ok(st == 400 and "top_logprobs" in msg, "top_logprobs without logprobs "
       "is refused", r)
    st, msg, r, _ = err({"model": "stories", "messages": [
        {"role": "wizard", "content": "Hi"}]}, path="/v1/chat/completions")
    ok(st == 400 and "wizard" in msg, "an unknown role is refused naming it",
       r)

    # --- logprobs ------------------------------------------------------------
    st, _, r = jcall(HS, "POST", "/v1/completions", {
        "model": "stories", "prompt": golden["prompt_tokens"],
        "max_tokens": 6, "temperature": 0, "logprobs": 2})
    lp = r["choices"][0]["logprobs"] if st == 200 else {}
    ok(st == 200 and "".join(lp["tokens"]) == r["choices"][0]["text"] and
       len(lp["token_logprobs"]) == 6 and
       all(x <= 0 for x in lp["token_logprobs"]) and
       all(len(t) == 2 for t in lp["top_logprobs"]) and
       all(max(t, key=t.get) == tok for t, tok in
           zip(lp["top_logprobs"], lp["tokens"])) and
       lp["text_offset"] == [len("".join(lp["tokens"][:i]))
                             for i in range(6)],
       "completions logprobs: tokens, greedy choice on top, offsets", lp)

    # --- Ollama --------------------------------------------------------------
    st, hd, raw = call(HS, "POST", "/api/generate", {
        "model": "stories", "prompt": "Once upon a time",
        "options": {"num_predict": n, "temperature": 0}})
    lines = raw.decode().split("\n")
    objs = [json.loads(x) for x in lines if x]
    ok(st == 200 and hd.get("content-type") == "application/x-ndjson" and
       lines[-1] == "" and all(x for x in lines[:-1]),
       "generate: NDJSON, one object per line", raw[:200])
    last = objs[-1] if objs else {}
    ok(all(not o["done"] for o in objs[:-1]) and last.get("done") is True and
       last.get("done_reason") == "length" and last.get("eval_count") == n and
       last.get("prompt_eval_count") == len(golden["prompt_tokens"]) and
       all(isinstance(last.get(k), int) and last.get(k) >= 0 for k in
           ("total_duration", "load_duration", "prompt_eval_duration",
            "eval_duration")) and
       last["total_duration"] >= last["eval_duration"],
       "generate: final object with done, done_reason, counts and ns "
       "durations", last)
    ok("".join(o["response"] for o in objs) == greedy_text and
       all("created_at" in o and o["model"] == "stories" for o in objs),
       "generate: responses add up to the text", objs[:2])
    st, _, r = jcall(HS, "POST", "/api/generate", {
        "model": "stories", "prompt": "x", "options": {"top_k": "many"}})
    ok(st == 400 and "top_k" in r.get("error", ""), "Ollama errors are "
       "{\"error\": ...} naming the field", r)
    st, _, r = jcall(HS, "POST", "/api/generate", {"model": "nope",
                                                    "prompt": "x"})
    ok(st == 404 and "nope" in r.get("error", ""), "Ollama 404 for an "
       "unknown model", r)
    st, _, v = jcall(HS, "GET", "/api/version")
    ok(st == 200 and "version" in v, "GET /api/version", v)
    st, _, t = jcall(HS, "GET", "/api/tags")
    names = [x["name"] for x in t.get("models", [])]
    ok(st == 200 and "stories" in names and "lazy" in names and
       t["models"][0]["details"]["format"] == "gguf", "GET /api/tags", t)
    st, _, s = jcall(HS, "POST", "/api/show", {"model": "stories"})
    ok(st == 200 and s["model_info"]["general.architecture"] == "llama" and
       "completion" in s["capabilities"] and "template" in s and
       s["details"]["family"] == "llama", "POST /api/show", s)
    st, _, s = jcall(HS, "POST", "/api/show", {"model": "nope"})
    ok(st == 404, "POST /api/show of an unknown model", s)

    # --- lazy models and keep-alive -------------------------------------------
    st, _, ps = jcall(HS, "GET", "/api/ps")
    ok(st == 200 and [x["name"] for x in ps["models"]] == ["stories"],
       "GET /api/ps: the lazy model is not resident", ps)
    st, _, r = jcall(HS, "POST", "/api/generate", {"model": "lazy"})
    ok(st == 200 and r.get("done") is True and r.get("done_reason") == "load",
       "an empty prompt loads a lazy model", r)
    st, _, ps = jcall(HS, "GET", "/api/ps")
    ok("lazy" in [x["name"] for x in ps["models"]] and
       all("expires_at" in x for x in ps["models"]), "it is resident now", ps)
    gone = False
    for _ in range(100):
        time.sleep(0.1)
        st, _, ps = jcall(HS, "GET", "/api/ps")
        if "lazy" not in [x["name"] for x in ps["models"]]:
            gone = True
            break
    ok(gone and "idle for its keep-alive" in d.logtext(),
       "keep-alive=1s unloads it once idle", ps)
    st, _, r = jcall(HS, "POST", "/v1/completions", {
        "model": "lazy", "prompt": "Once upon a time", "max_tokens": n,
        "temperature": 0})
    ok(st == 200 and r["choices"][0]["text"] == greedy_text,
       "the first request loads a lazy model and waits for it", r)
    st, _, r = jcall(HS, "POST", "/api/generate", {"model": "lazy",
                                                    "keep_alive": 0})
    st2, _, ps = jcall(HS, "GET", "/api/ps")
    ok(st == 200 and r.get("done_reason") == "unload" and
       "lazy" not in [x["name"] for x in ps["models"]],
       "keep_alive 0 with an empty prompt unloads", (r, ps))
    st, _, r = jcall(HS, "POST", "/api/generate", {"model": "lazy",
                                                    "keep_alive": "soon"})
    ok(st == 400 and "keep_alive" in r.get("error", ""),
       "a bad keep_alive is refused naming it", r)

    # --- chat (template rendering) -------------------------------------------
    msgs = [{"role": "system", "content": "You tell stories."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me "},
                                         {"type": "text", "text": "a story."}]}]
    rc, out, _ = d.ctl("--json", "render", "stories", "--system",
                       "You tell stories.", "Tell me a story.")
    rendered = json.loads(out) if rc == 0 else {"tokens": []}
    st, _, c = jcall(HS, "POST", "/v1/chat/completions", {
        "model": "stories", "messages": msgs, "max_tokens": 10,
        "logprobs": True, "top_logprobs": 3})
    ok(st == 200 and c["object"] == "chat.completion" and
       c["id"].startswith("chatcmpl-") and
       c["choices"][0]["message"]["role"] == "assistant" and
       c["usage"]["prompt_tokens"] == len(rendered["tokens"]) and
       c["usage"]["completion_tokens"] == 10,
       "chat: the template's prompt (as phasectl render), the reply", c)
    chat_text = c["choices"][0]["message"]["content"] if st == 200 else ""
    clp = c["choices"][0]["logprobs"]["content"] if st == 200 else []
    ok(len(clp) == 10 and all(len(e["top_logprobs"]) == 3 and
                               e["top_logprobs"][0]["token"] == e["token"]
                               for e in clp) and
       "".join(e["token"] for e in clp) == chat_text,
       "chat logprobs: content entries with top_logprobs", clp[:2])
    st, _, raw = call(HS, "POST", "/v1/chat/completions", {
        "model": "stories", "messages": msgs, "max_tokens": 10,
        "stream": True})
    ev = sse_events(raw) or []
    ch = [json.loads(e) for e in ev[:-1]]
    ok(st == 200 and ev and ev[-1] == "[DONE]" and ch and
       ch[0]["object"] == "chat.completion.chunk" and
       ch[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
       and ch[-1]["choices"][0]["finish_reason"] == "length" and
       ch[-1]["choices"][0]["delta"] == {} and
       "".join(x["choices"][0]["delta"].get("content", "") for x in ch) ==
       chat_text, "chat stream: role chunk, content deltas, finish chunk, "
       "[DONE]", ch[:2])
    st, _, oc = jcall(HS, "POST", "/api/chat", {
        "model": "stories", "messages": msgs, "stream": False,
        "options": {"num_predict": 10}})
    ok(st == 200 and oc["message"] == {"role": "assistant",
                                        "content": chat_text} and
       oc["done"] is True and oc["prompt_eval_count"] ==
       len(rendered["tokens"]) and "context" not in oc,
       "Ollama chat: the same turn", oc)
    st, _, raw = call(HS, "POST", "/api/chat", {
        "model": "stories", "messages": msgs, "options": {"num_predict": 10}})
    objs = [json.loads(x) for x in raw.decode().split("\n") if x]
    ok(st == 200 and objs and objs[-1]["done"] is True and
       "".join(o["message"]["content"] for o in objs) == chat_text,
       "Ollama chat: NDJSON stream", objs[-1:])
    st, _, s = jcall(HS, "POST", "/api/show", {"model": "stories"})
    ok(st == 200 and s["template"] == rendered.get("chat_template"),
       "POST /api/show names the template in use", s.get("template"))

    # --- metrics -------------------------------------------------------------
    st, hd, out = call(HS, "GET", "/metrics")
    text = out.decode()
    ok(st == 200 and hd["content-type"].startswith("text/plain; "
       "version=0.0.4") and 'phased_requests_finished_total{model="stories"'
       in text and 'vllm:num_requests_running{model_name="stories"}' in text,
       "GET /metrics: Prometheus text with phased and vLLM names", text[:300])

    # --- a client that goes away cancels its request ---------------------------
    def cancelled():
        t = call(HS, "GET", "/metrics")[2].decode()
        for line in t.splitlines():
            if line.startswith('phased_requests_finished_total{model='
                               '"stories",reason="cancelled"}'):
                return int(float(line.split()[-1]))
        return -1
    before = cancelled()
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"model": "stories", "prompt": "Once upon a time",
                       "max_tokens": 400, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
              b"Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" %
              len(body) + body)
    s.recv(200)
    s.close()
    for _ in range(100):
        if cancelled() > before:
            break
        time.sleep(0.05)
    ok(cancelled() == before + 1, "a client that disconnects mid-stream "
       "cancels its request", (before, cancelled()))

    # --- TCP: the API key --------------------------------------------------------
    st, hd, r = jcall(port, "GET", "/v1/models")
    ok(st == 401 and "bearer" in hd.get("www-authenticate", "").lower(),
       "TCP without the API key: 401", r)
    st, _, r = jcall(port, "GET", "/v1/models",
                     headers={"Authorization": "Bearer wrong"})
    ok(st == 401, "TCP with a wrong key: 401", r)
    st, _, r = jcall(port, "GET", "/v1/models", headers=AUTH)
    ok(st == 200, "TCP with the key: 200", r)

    # --- phasectl bench --url -------------------------------------------------
    env = dict(os.environ, OPENAI_API_KEY=KEY)
    p = subprocess.run([PHASECTL, "--json", "bench", "stories", "--url",
                        "http://127.0.0.1:%d/v1" % port, "--concurrency", "3",
                        "--requests", "9", "--prompt-len", "16",
                        "--output-len", "8", "--quiet"], capture_output=True,
                       env=env, timeout=120)
    try:
        rep = json.loads(p.stdout)
    except ValueError:
        rep = {}
    ok(p.returncode == 0 and rep.get("completed") == 9 and
       rep.get("errors") == 0 and rep.get("output_tokens", 9 * 8) == 9 * 8,
       "phasectl bench --url runs a workload over HTTP", (p.stdout[:500],
                                                          p.stderr[-500:]))
    p = subprocess.run([PHASECTL, "bench", "stories", "--url",
                        "http://127.0.0.1:%d/v1" % port, "--requests", "1",
                        "--quiet"], capture_output=True, timeout=60,
                       env=dict(os.environ, OPENAI_API_KEY=""))
    ok(p.returncode != 0 and b"API key" in p.stderr, "bench --url reports "
       "the server's error", p.stderr[-500:])
    p = subprocess.run([PHASECTL, "bench", "stories", "--url", "https://x"],
                       capture_output=True, timeout=60)
    ok(p.returncode != 0 and b"http://" in p.stderr, "bench --url refuses "
       "a URL it cannot use", p.stderr)

    # --- hostile clients -----------------------------------------------------------
    def witness():
        st, _, r = jcall(HS, "POST", "/v1/completions", {
            "model": "stories", "prompt": "Once upon a time", "max_tokens": 4,
            "temperature": 0})
        return st == 200 and greedy_text.startswith(r["choices"][0]["text"])

    out = raw_exchange(port, b"GARBAGE\r\n\r\n")
    ok(status_of(out) == 400 or out == b"", "a malformed request line is "
       "refused", out[:100])
    out = raw_exchange(port, b"GET /health HTTP/1.1\r\nX: " + b"a" * 100000 +
                       b"\r\n\r\n")
    ok(status_of(out) in (400, 413, 431) or out == b"",
       "huge headers are refused", out[:100])
    out = raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 99999999999\r\n\r\n")
    ok(status_of(out) in (400, 413) or out == b"", "a huge Content-Length "
       "is refused", out[:100])
    out = raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\n")
    ok(status_of(out) in (400, 413) or out == b"", "a bad chunk size is "
       "refused", out[:100])
    ok(witness(), "witness served after malformed requests")

    # Slowloris: connections that trickle a header byte at a time.
    slow = []
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow.append(c)
    ok(witness(), "witness served while slowloris clients hold connections")
    time.sleep(3.5)
    closed = 0
    for c in slow:
        try:
            c.settimeout(0.5)
            c.sendall(b"a")
            if c.recv(100) == b"":
                closed += 1
        except OSError:
            closed += 1
        c.close()
    ok(closed == len(slow), "slow clients are dropped after http-timeout",
       "%d of %d" % (closed, len(slow)))

    # Many concurrent connections, each with a request half sent.
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    many = []
    try:
        for i in range(2000):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(HS)
            c.sendall(b"GET /health HTTP/1.1\r\n")
            many.append(c)
    except OSError as e:
        diag("opened %d connections: %s" % (len(many), e))
    ok(len(many) >= 1000 and witness(), "witness served with %d other "
       "connections open" % len(many))
    for c in many:
        c.close()
    ok(witness() and d.alive(), "the daemon keeps serving")
    # SIGTERM ends a running stream properly, as cancelled.
    c = UnixHTTP(HS)
    c.request("POST", "/v1/completions", body=json.dumps({
        "model": "stories", "prompt": "Once upon a time", "max_tokens": 500,
        "temperature": 1, "stream": True}))
    resp = c.getresponse()
    first = resp.readline()
    d.signal(signal.SIGTERM)
    rest = resp.read().decode()
    c.close()
    ev = sse_events(first + rest.encode()) if first else None
    fins = [json.loads(e)["choices"][0]["finish_reason"] for e in ev or []
            if e != "[DONE]" and json.loads(e)["choices"]]
    ok(ev is not None and ev[-1] == "[DONE]" and fins and
       fins[-1] == "abort", "SIGTERM: a running stream ends with "
       "finish_reason abort and [DONE]", rest[-300:])
finally:
    rc = d.stop()
    ok(rc == 0, "daemon exits cleanly", d.logtext()[-2000:])
    ok(not os.path.exists(os.path.join(d.dir, "phased-http.sock")),
       "the HTTP socket is removed at exit")
    d.cleanup()

# Models loaded on demand under model-memory-limit (each file is ~1.2 MB):
# an idle one is unloaded to make room, one in use is not.
d3 = Daemon("plugin-dir %s\n%s"
            "model a %s ctx=128 load=lazy\nmodel b %s ctx=128 load=lazy\n"
            "model big %s load=lazy\nmodel-memory-limit 2M\n" %
            (PLUGINS, "socket-group nogroup\n" if os.geteuid() == 0 else "",
             MODEL, MODEL, os.path.join(SHARED, "models", "arch",
                                        "mistral-hd.gguf")), dirmode=0o711)
d3.start()
HS3 = os.path.join(d3.dir, "phased-http.sock")
try:
    st, _, r = jcall(HS3, "POST", "/api/generate", {"model": "a"})
    st2, _, r2 = jcall(HS3, "POST", "/api/generate", {"model": "b"})
    st3, _, ps = jcall(HS3, "GET", "/api/ps")
    ok(st == 200 and st2 == 200 and [m["name"] for m in ps["models"]] ==
       ["b"] and "unloading to make room for b" in d3.logtext(),
       "model-memory-limit: loading b unloads idle a", (r, r2, ps))
    # 3.6 MB does not fit even with b unloaded: 429 with Retry-After.
    st, hd, r = jcall(HS3, "POST", "/v1/completions",
                      {"model": "big", "prompt": "x"})
    ok(st == 429 and hd.get("retry-after") == "1" and
       "model-memory-limit" in r["error"]["message"],
       "a model over model-memory-limit gets 429", (st, r))
    if os.geteuid() == 0 and shutil.which("setpriv") and shutil.which("curl"):
        def as_nobody(body):
            p = subprocess.run(
                ["setpriv", "--reuid=nobody", "--regid=nogroup",
                 "--clear-groups", "curl", "-s", "-w", "\n%{http_code}",
                 "--unix-socket", HS3, "http://x/api/generate", "-d",
                 json.dumps(body)], capture_output=True, timeout=60)
            out = p.stdout.decode().rsplit("\n", 1)
            return (int(out[1]) if len(out) == 2 and out[1].isdigit()
                    else 0), out[0]
        st, out = as_nobody({"model": "b", "prompt": "Hi", "stream": False,
                             "options": {"num_predict": 2}})
        ok(st == 200 and '"done":true' in out, "a peer without admin rights "
           "may generate", out)
        st, out = as_nobody({"model": "b", "keep_alive": 0})
        ok(st == 403 and "admin" in out, "a peer without admin rights may "
           "not change keep_alive (403)", out)
finally:
    d3.stop()
    d3.cleanup()

# A TCP address other than loopback needs a key.
d2 = Daemon("plugin-dir %s\nhttp-listen 0.0.0.0:%d\n" % (PLUGINS, free_port()))
d2.start(wait=False)
rc = d2.proc.wait(timeout=30)
ok(rc != 0 and "http-api-key" in d2.logtext(), "a non-loopback http-listen "
   "without http-api-key is refused", d2.logtext())
d2.logf.close()
d2.cleanup()
done()
