"""weft serve driven by the official openai package: completions and chat,
streamed and not, logprobs, stop sequences, usage; concurrent streams equal
the same requests one at a time; disconnects free their KV; rate limits and
a full queue answer 429/503 with Retry-After; SIGTERM drains."""
import concurrent.futures as cf
import json
import math
import os
import re
import socket
import tempfile
import threading
import time

import pytest

from conftest import Server, metric_in, open_stream

openai = pytest.importorskip("openai")

PROMPTS = [
    "The capital of France is",
    "Water boils at 100 degrees Celsius. The boiling point",
    "Once upon a time, there was a little",
    "def fibonacci(n):",
    "The three primary colors are",
    "In 1969, the first humans",
    "My favourite food is",
    "The quick brown fox",
    "To make a cup of tea, first",
    "Photosynthesis is the process",
    "The largest planet in the solar system",
    "A haiku about the sea:",
    "Dear diary, today I",
    "The recipe calls for two cups of",
    "Machine learning is",
    "It was a dark and stormy night;",
]


def test_models_health_ready(server, client):
    models = client.models.list()
    assert len(models.data) == 1 and models.data[0].id
    assert server.get("/health")[0] == 200
    status, body = server.get("/ready")
    assert status == 200 and json.loads(body)["status"] == "ready"


def test_completion_greedy_with_usage_and_logprobs(client, model_id):
    r = client.completions.create(model=model_id, prompt=PROMPTS[1], max_tokens=12, temperature=0, logprobs=3)
    c = r.choices[0]
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 5 and r.usage.total_tokens == r.usage.prompt_tokens + 12
    lp = c.logprobs
    assert len(lp.tokens) == 12 and len(lp.token_logprobs) == 12 and len(lp.top_logprobs) == 12
    assert "".join(lp.tokens) == c.text
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and len(top) <= 3
        # greedy: the chosen token is the most likely one
        assert math.isclose(max(top.values()), l, abs_tol=1e-5)
    # the same request again gives the same text (greedy is deterministic)
    r2 = client.completions.create(model=model_id, prompt=PROMPTS[1], max_tokens=12, temperature=0)
    assert r2.choices[0].text == c.text


def test_completion_stream_matches_non_stream(client, model_id):
    full = client.completions.create(model=model_id, prompt=PROMPTS[0], max_tokens=20, temperature=0)
    text, finish, usage = "", None, None
    stream = client.completions.create(model=model_id, prompt=PROMPTS[0], max_tokens=20, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    for ch in stream:
        if ch.choices:
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = ch.usage
    assert text == full.choices[0].text
    assert finish == "length"
    assert usage.completion_tokens == 20 and usage.prompt_tokens == full.usage.prompt_tokens


def test_chat_non_stream_and_stream(client, model_id):
    # SmolLM2-135M with its own template (its default system prompt injected) answers this one right
    msgs = [{"role": "user", "content": "Name the capital of France."}]
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=40, temperature=0)
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant" and "Paris" in m.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1
    parts, roles, finish = [], [], None
    for ch in client.chat.completions.create(model=model_id, messages=msgs, max_tokens=40, temperature=0,
                                             stream=True):
        d = ch.choices[0].delta
        if d.role:
            roles.append(d.role)
        if d.content:
            parts.append(d.content)
        finish = ch.choices[0].finish_reason or finish
    assert roles == ["assistant"]
    assert "".join(parts) == m.content
    assert finish == r.choices[0].finish_reason
    # text-part array content is the same prompt
    r3 = client.chat.completions.create(
        model=model_id, max_tokens=40, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name the capital "},
                                               {"type": "text", "text": "of France."}]}])
    assert r3.choices[0].message.content == m.content


def test_chat_logprobs(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Say hello."}],
                                       max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token


def test_stop_sequences(client, model_id):
    base = client.completions.create(model=model_id, prompt=PROMPTS[1], max_tokens=30, temperature=0)
    text = base.choices[0].text
    assert len(text) > 10
    stop = text[6:9]  # a string the greedy output contains
    cut = text[: text.index(stop)]
    r = client.completions.create(model=model_id, prompt=PROMPTS[1], max_tokens=30, temperature=0, stop=[stop])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=model_id, prompt=PROMPTS[1], max_tokens=30, temperature=0, stop=["zzzq", stop], stream=True)
        if ch.choices)
    assert streamed == cut


def test_seeded_sampling_is_reproducible(client, model_id):
    kw = dict(model=model_id, prompt=PROMPTS[2], max_tokens=16, temperature=0.9, top_p=0.9, seed=1234)
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b


def test_concurrent_streams_equal_sequential(client, model_id):
    def run(p):
        return "".join(ch.choices[0].text for ch in client.completions.create(
            model=model_id, prompt=p, max_tokens=24, temperature=0, stream=True, extra_body={"ignore_eos": True})
            if ch.choices)
    alone = [run(p) for p in PROMPTS]
    with cf.ThreadPoolExecutor(16) as ex:
        together = list(ex.map(run, PROMPTS))
    assert together == alone


def test_disconnects_free_kv(server):
    socks = [open_stream(server.port, PROMPTS[i % len(PROMPTS)] + " " * (i % 5), 200) for i in range(50)]
    # wait until some have streamed something, then drop them all
    got = socks[0].recv(256)
    assert got.startswith(b"HTTP/1.1 200")
    for s in socks:
        s.close()
    deadline = time.time() + 60
    while time.time() < deadline:
        if server.metric("weft_kv_blocks_used") == 0 and server.metric("weft_requests_running") == 0 \
                and server.metric("weft_requests_waiting") == 0:
            break
        time.sleep(0.2)
    assert server.metric("weft_kv_blocks_used") == 0
    assert server.metric("weft_client_disconnects_total") >= 1
    assert server.get("/health")[0] == 200


def test_metrics_text_format(server, client, model_id):
    client.completions.create(model=model_id, prompt="Hi", max_tokens=2)
    status, text = server.get("/metrics")
    assert status == 200
    for name in ("weft_requests_total", "weft_prompt_tokens_total", "weft_generation_tokens_total",
                 "weft_time_to_first_token_seconds_bucket", "weft_inter_token_latency_seconds_bucket",
                 "weft_requests_running", "weft_requests_waiting", "weft_kv_blocks_used", "weft_kv_blocks_free",
                 "weft_kv_blocks_cached", "weft_prefix_cache_hit_tokens_total", "weft_preemptions_total",
                 "weft_device_memory_bytes"):
        assert name in text, name
    assert metric_in(text, "weft_requests_total", {"endpoint": "/v1/completions", "status": "200"}) >= 1
    # the names the router, dashboard and autoscalers will query
    assert 0 <= metric_in(text, "weft_kv_cache_usage_ratio") <= 1
    assert metric_in(text, "weft_kv_blocks") > 0
    assert metric_in(text, "weft_request_finish_total", {"reason": "length"}) >= 1
    assert metric_in(text, "weft_request_queue_seconds_count") >= 1
    assert metric_in(text, "weft_decode_tokens_per_second") > 0  # measured on the live steps above
    # Prometheus' conventions (what promtool checks): every sample in a declared
    # family, counters end in _total and gauges do not, every weft series names its model
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = re.match(r"^[^{\s]+", line).group(0)
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, line
        assert 'model_name="' + model_id + '"' in line, line
    for name, kind in types.items():
        assert (kind == "counter") == name.endswith("_total"), (name, kind)


def test_logit_bias(server, client, model_id):
    """OpenAI's logit_bias: +100 on one token makes every greedy token that
    one; -100 on the greedy answer's first token changes the answer."""
    import urllib.request
    req = urllib.request.Request(server.base + "/tokenize", data=json.dumps({"prompt": " the"}).encode(),
                                 headers={"Content-Type": "application/json"})
    the = json.loads(urllib.request.urlopen(req).read())["tokens"][-1]
    r = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=6, temperature=0,
                                  logit_bias={str(the): 100})
    assert r.choices[0].text == " the" * 6, r.choices[0].text
    plain = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=1, temperature=0,
                                      logprobs=1)
    first = plain.choices[0].logprobs.tokens[0]
    req = urllib.request.Request(server.base + "/tokenize", data=json.dumps({"prompt": first}).encode(),
                                 headers={"Content-Type": "application/json"})
    tid = json.loads(urllib.request.urlopen(req).read())["tokens"][-1]
    biased = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=1, temperature=0,
                                       logit_bias={str(tid): -100})
    assert biased.choices[0].text != plain.choices[0].text
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model_id, prompt="x", max_tokens=1, logit_bias={"abc": 1})
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model_id, prompt="x", max_tokens=1, logit_bias={"1": 101})


def test_echo(server, client, model_id):
    """echo: the prompt's text before the completion's, streamed or not
    (ids detokenized, special tokens as their text); with logprobs, and for
    chats, a 400."""
    kw = dict(model=model_id, prompt="Once upon a time", max_tokens=5, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    assert client.completions.create(**kw, echo=True).choices[0].text == "Once upon a time" + plain
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(**kw, echo=True, stream=True)
                       if ch.choices)
    assert streamed == "Once upon a time" + plain
    import urllib.request
    req = urllib.request.Request(server.base + "/tokenize", data=json.dumps({"prompt": "<|im_start|>user"}).encode(),
                                 headers={"Content-Type": "application/json"})
    ids = json.loads(urllib.request.urlopen(req).read())["tokens"]
    r = client.completions.create(model=model_id, prompt=ids, max_tokens=2, temperature=0, echo=True)
    assert r.choices[0].text.startswith("<|im_start|>user"), r.choices[0].text
    with pytest.raises(openai.BadRequestError):
        client.completions.create(**kw, echo=True, logprobs=1)


def test_tokenize_detokenize(server):
    import urllib.request
    req = urllib.request.Request(server.base + "/tokenize", data=json.dumps({"prompt": "Hello world"}).encode(),
                                 headers={"Content-Type": "application/json"})
    toks = json.loads(urllib.request.urlopen(req).read())["tokens"]
    assert len(toks) >= 2
    req = urllib.request.Request(server.base + "/detokenize", data=json.dumps({"tokens": toks}).encode(),
                                 headers={"Content-Type": "application/json"})
    assert json.loads(urllib.request.urlopen(req).read())["prompt"] == "Hello world"


def test_api_keys_and_rate_limit():
    cfg = {"tenants": [{"name": "slow", "api_keys": ["sk-slow-0001"], "requests_per_second": 0.2, "burst": 2},
                       {"name": "fast", "api_keys": ["sk-fast-0001"], "priority": 5, "share": 3}]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    srv = Server("--config", f.name)
    try:
        base = srv.base + "/v1"
        mid = openai.OpenAI(base_url=base, api_key="sk-fast-0001", max_retries=0).models.list().data[0].id
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="sk-wrong-0001", max_retries=0).completions.create(
                model=mid, prompt="x", max_tokens=1)
        status, _ = srv.get("/v1/models")
        assert status == 401
        slow = openai.OpenAI(base_url=base, api_key="sk-slow-0001", max_retries=0)
        slow.completions.create(model=mid, prompt="x", max_tokens=1)
        slow.completions.create(model=mid, prompt="x", max_tokens=1)
        with pytest.raises(openai.RateLimitError) as e:
            slow.completions.create(model=mid, prompt="x", max_tokens=1)
        ra = e.value.response.headers.get("retry-after")
        assert ra is not None and int(ra) >= 1
        # another tenant is not limited by it
        openai.OpenAI(base_url=base, api_key="sk-fast-0001", max_retries=0).completions.create(
            model=mid, prompt="x", max_tokens=1)
        # prompt tokens by tenant, in the metrics (the key's tenant, which a request cannot name)
        text = srv.get("/metrics")[1]
        assert metric_in(text, "weft_tenant_prefill_tokens_total", {"tenant": "slow"}) >= 2
        assert metric_in(text, "weft_tenant_prefill_tokens_total", {"tenant": "fast"}) >= 1
    finally:
        srv.stop()
        os.unlink(f.name)


def test_queue_full_is_503_with_retry_after():
    srv = Server("--max-seqs", "1", "--max-waiting", "1")
    try:
        # one runs, then one waits (the second sent only once the first has left the queue)
        socks = []
        for i, name in enumerate(("weft_requests_running", "weft_requests_waiting")):
            socks.append(open_stream(srv.port, PROMPTS[i], 4000))
            deadline = time.time() + 60
            while time.time() < deadline and srv.metric(name) != 1:
                time.sleep(0.02)
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)
        codes = []
        for _ in range(3):
            try:
                c.completions.create(model="default", prompt="x", max_tokens=1)
                codes.append(200)
            except openai.APIStatusError as e:
                codes.append(e.status_code)
                if e.status_code == 503:
                    assert int(e.response.headers["retry-after"]) >= 1
        assert 503 in codes, (codes, srv.metric("weft_requests_running"), srv.metric("weft_requests_waiting"))
        for s in socks:
            s.close()
        assert srv.get("/health")[0] == 200
    finally:
        srv.stop()


def test_sigterm_drains_in_flight():
    srv = Server()
    out = {}

    def run():
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0)
        out["r"] = c.completions.create(model="default", prompt=PROMPTS[3], max_tokens=48, temperature=0,
                                        extra_body={"ignore_eos": True})

    t = threading.Thread(target=run)
    t.start()
    # SIGTERM once the request is in flight (running, or queued for a step), not after a guessed delay
    deadline = time.time() + 60
    while time.time() < deadline and srv.metric("weft_requests_running") + srv.metric("weft_requests_waiting") < 1:
        time.sleep(0.01)
    assert srv.metric("weft_requests_running") + srv.metric("weft_requests_waiting") == 1
    srv.stop()  # SIGTERM: the request in flight completes, then exit 0
    t.join(60)
    assert out["r"].usage.completion_tokens == 48


def test_slow_reader_is_dropped():
    """A client that never reads its stream does not make the server queue
    without bound: past --max-stream-buffer-kib its request is aborted, its
    KV freed, and the stream ends with an error event saying why."""
    srv = Server("--max-stream-buffer-kib", "16")
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.connect(("127.0.0.1", srv.port))
        # top-20 logprobs make each event ~2 KB; unread bytes count where they
        # wait, in the server's queue or in the kernel's send queue
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 6000, "stream": True, "ignore_eos": True,
                           "temperature": 0, "logprobs": 20}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.time() + 120
        while time.time() < deadline and srv.metric("weft_slow_client_aborts_total") < 1:
            time.sleep(0.2)
        assert srv.metric("weft_slow_client_aborts_total") == 1
        while time.time() < deadline and srv.metric("weft_kv_blocks_used") > 0:
            time.sleep(0.1)
        assert srv.metric("weft_kv_blocks_used") == 0
        assert srv.metric("weft_generation_tokens_total") < 6000
        # the stream says why it ends short before it ends: an error event, no [DONE]
        data = b""
        s.settimeout(5)
        while b"\r\n0\r\n\r\n" not in data[-64:]:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
        assert b'data: {"error"' in data and b"did not read" in data
        assert b"data: [DONE]" not in data
        s.close()
    finally:
        srv.stop()
