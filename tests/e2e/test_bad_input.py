"""Malformed and hostile requests, one by one: each gets the right 4xx (or,
for bytes that are not HTTP, a closed connection), never a 5xx, and the
server still answers /health after each. 200 idle connections do not keep
a new client out."""
import json
import re
import socket
import time

import pytest

GOOD = {"prompt": "Hello", "max_tokens": 1}


def exchange(port, raw, timeout=15):
    """Send raw bytes; return (status or None if closed without a response, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep:
                cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(rest) >= int(cl[0].split(b":")[1]):
                    break
        if not data.startswith(b"HTTP/1.1 "):
            return None, data
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head[9:12]), body
    finally:
        s.close()


def post(path, body, extra=b""):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
            % (path.encode(), extra, len(body)) + body)


def healthy(server):
    assert server.get("/health")[0] == 200


TRANSPORT = [
    ("garbage bytes", b"\x00\x01\x02garbage\xff\xfe\r\n\r\n", (400, None)),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (400, 505, None)),
    ("request line too long", b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", (414, 431, 400)),
    ("headers too large", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 70000 + b"\r\n\r\n", (431, 400)),
    ("too many headers", b"GET /health HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(300)) + b"\r\n",
     (431, 400)),
    ("body too large", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n{", (413,)),
    ("negative content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", (400,)),
    ("garbage content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n", (400,)),
    ("conflicting content-lengths",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello", (400,)),
    ("content-length with transfer-encoding",
     b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
     (400,)),
    ("bad chunk size", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n",
     (400,)),
    ("lying content-length (short)",
     b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n{"prompt": "hi", "max_tokens": 1}',
     (400,)),
    ("bad HTTP version", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", (505, 400)),
]


@pytest.mark.parametrize("name,raw,want", TRANSPORT, ids=[t[0] for t in TRANSPORT])
def test_transport(server, name, raw, want):
    status, body = exchange(server.port, raw)
    assert status in want, (name, status, body[:200])
    if status is not None:
        err = json.loads(body)["error"]
        assert err["message"]
    healthy(server)


def bad_params():
    cases = []
    for key, vals in {
        "max_tokens": ["8", -1, 0, 1.5, True, 1 << 40],
        "temperature": ["hot", -0.1, 2.5, [1]],
        "top_p": [0, -1, 1.5, "x"],
        "top_k": [-5, "x", 1.5],
        "min_p": [-0.1, 1.1, "x"],
        "presence_penalty": [3, -3, "x"],
        "frequency_penalty": [2.5, "x"],
        "seed": ["x", 1.5],
        "n": [17, 0, "x"],
        "stop": [5, [1], [""], ["x"] * 100, "s" * 5000],
        "stream": ["yes", 1],
        "logprobs": [-1, 21, "x"],
        "ignore_eos": ["x"],
        "priority": ["x", 1.5],
        "stream_options": ["x", {"include_usage": "x"}],
        "echo": ["yes", 1],
        "model": [5, "no-such-model"],
    }.items():
        for v in vals:
            if v is None:
                continue
            cases.append(("/v1/completions", dict(GOOD, **{key: v}), key))
    for prompt in [None, 5, [], [-1], ["a", [1]], "", [1.5], {"x": 1}, [10 ** 12]]:
        body = dict(GOOD)
        if prompt is None:
            del body["prompt"]
        else:
            body["prompt"] = prompt
        cases.append(("/v1/completions", body, "prompt"))
    for msgs in [None, [], "hi", [{}], [{"role": "user"}], [{"role": "wizard", "content": "x"}],
                 [{"role": "user", "content": 5}], [{"role": 5, "content": "x"}],
                 [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                 [{"role": "user", "content": [{"type": "text"}]}], ["x"]]:
        body = {"max_tokens": 1}
        if msgs is not None:
            body["messages"] = msgs
        cases.append(("/v1/chat/completions", body, "messages"))
    cases.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3},
                  "top_logprobs"))
    cases.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True,
                                           "top_logprobs": 30}, "top_logprobs"))
    return cases


BAD = bad_params()


@pytest.mark.parametrize("path,body,param", BAD, ids=[f"{c[2]}-{i}" for i, c in enumerate(BAD)])
def test_bad_parameters(server, path, body, param):
    status, resp = exchange(server.port, post(path, body))
    assert status in (400, 404), (body, status, resp[:300])
    err = json.loads(resp)["error"]
    assert err["message"] and err["type"]
    healthy(server)


BODIES = [
    ("not JSON", b"hello there", 400),
    ("truncated JSON", b'{"prompt": "hi", "max_tok', 400),
    ("JSON array", b"[1, 2, 3]", 400),
    ("100k-deep JSON", b"[" * 100000 + b"]" * 100000, 400),
    ("deep object", b'{"prompt":' + b'{"a":' * 5000 + b"1" + b"}" * 5001, 400),
    ("invalid UTF-8", b'{"prompt": "caf\xc3\x28 \xff", "max_tokens": 1}', 400),
    ("duplicate keys", b'{"prompt": "a", "prompt": "b"}', 400),
    ("empty body", b"", 400),
    ("prompt longer than the context", json.dumps({"prompt": "hello " * 20000, "max_tokens": 1}).encode(), 400),
    ("max_tokens beyond the context", json.dumps({"prompt": "hi", "max_tokens": 10 ** 6}).encode(), 400),
]


@pytest.mark.parametrize("name,body,want", BODIES, ids=[b[0] for b in BODIES])
def test_bad_bodies(server, name, body, want):
    status, resp = exchange(server.port, post("/v1/completions", body))
    assert status == want, (name, status, resp[:300])
    assert json.loads(resp)["error"]["message"]
    healthy(server)


def test_long_prompt_message_names_the_limit(server):
    status, resp = exchange(server.port, post("/v1/completions", {"prompt": "hello " * 20000, "max_tokens": 1}))
    assert status == 400 and b"maximum context length" in resp


def test_unknown_paths_and_methods(server):
    assert exchange(server.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 404
    assert exchange(server.port, b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 405
    assert exchange(server.port, b"DELETE /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 405
    assert exchange(server.port, post("/health", b"{}"))[0] == 405
    healthy(server)


def test_keep_alive_and_pipelining(server):
    raw = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + post("/tokenize", {"prompt": "a b"}) +
           b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", server.port), timeout=15)
    s.sendall(raw)
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        data += c
    s.close()
    statuses = [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]
    assert statuses == [200, 200, 404, 200]


def test_idle_connections_do_not_block(server):
    # from another loopback address: one address gets at most 64 connections
    # (--max-conns-per-client), the rest are flagged and closed after 2 s
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=("127.0.0.2", 0))
            for _ in range(200)]
    try:
        t0 = time.time()
        assert server.get("/health")[0] == 200
        status, _ = exchange(server.port, post("/v1/completions", GOOD))
        assert status == 200
        assert time.time() - t0 < 30
    finally:
        for s in idle:
            s.close()


# vLLM / SGLang / llama-server extensions weft does not honour: each set to
# a value that would change the answer is a 400 naming it; at its no-op
# value it is what weft does anyway (200). chat_template_kwargs,
# add_generation_prompt and continue_final_message are honoured on chats
# (test_chat_formats.py); on completions they are refused unless no-ops:
# test_chat_only_extensions_on_completions. guided_json, guided_choice,
# guided_grammar, json_schema, grammar, stop_token_ids and min_tokens are honoured
# (test_guided.py).
EXTENSIONS = [
    ("guided_regex", "[a-z]+", None),
    ("skip_special_tokens", False, True), ("cache_prompt", False, True), ("typical_p", 0.5, 1),
    ("mirostat", 2, 0), ("use_beam_search", True, False), ("length_penalty", 2.0, 1.0),
]


@pytest.mark.parametrize("key,bad,noop", [("chat_template_kwargs", {"enable_thinking": False}, {}),
                                          ("continue_final_message", True, False),
                                          ("add_generation_prompt", False, True)])
def test_chat_only_extensions_on_completions(server, key, bad, noop):
    base = {"prompt": "Hello", "max_tokens": 2}
    status, resp = exchange(server.port, post("/v1/completions", dict(base, **{key: bad})))
    err = json.loads(resp).get("error", {})
    assert status == 400 and key in err.get("message", "") and err.get("param") == key, (key, status, resp[:300])
    status, resp = exchange(server.port, post("/v1/completions", dict(base, **{key: noop})))
    assert status == 200, (key, noop, status, resp[:300])


@pytest.mark.parametrize("key,bad,noop", EXTENSIONS, ids=[x[0] for x in EXTENSIONS])
def test_extensions_are_honoured_or_refused_by_name(server, key, bad, noop):
    for path, base in [("/v1/completions", {"prompt": "Hello", "max_tokens": 2}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})]:
        status, resp = exchange(server.port, post(path, dict(base, **{key: bad})))
        err = json.loads(resp).get("error", {})
        assert status == 400 and key in err.get("message", "") and err.get("param") == key, (key, status, resp[:300])
        if noop is not None:
            status, resp = exchange(server.port, post(path, dict(base, **{key: noop})))
            assert status == 200, (key, noop, status, resp[:300])
    healthy(server)
