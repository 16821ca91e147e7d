"""POST /v1/embeddings driven by the official openai package: 32 inputs in one
request (batched through the engine, beside a generation) equal the same
inputs one at a time; base64 equals float; token-id inputs equal their text;
last-token pooling; usage; and the refusals (dimensions, empty input, an
input longer than the context, a bad id, an unknown model)."""
import base64
import json
import math
import struct
import threading
import urllib.request

import pytest

from conftest import SANITIZED, Server

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server():
    # a short context: the longest-input checks stay cheap
    s = Server("-c", "256")
    yield s
    s.stop()

TEXTS = [
    "The capital of France is Paris.",
    "Water boils at 100 degrees Celsius.",
    "Once upon a time, there was a little fox who lived in the forest.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "The three primary colors are red, yellow and blue.",
    "In 1969, the first humans walked on the Moon.",
    "My favourite food is pizza.",
    "The quick brown fox jumps over the lazy dog.",
    "To make a cup of tea, first boil the water.",
    "Photosynthesis is the process by which plants make food from light.",
    "The largest planet in the solar system is Jupiter.",
    "A haiku about the sea: waves fold into foam, the gulls argue with the wind, salt on every stone.",
    "Dear diary, today I learned to ride a bicycle.",
    "The recipe calls for two cups of flour and one egg.",
    "Machine learning is a field of computer science.",
    "It was a dark and stormy night;",
    "hi",
    "Embeddings map text to vectors so that similar meanings land close together.",
    "SELECT name FROM users WHERE age > 30 ORDER BY name;",
    "Le chat est sur la table.",
    "1 2 3 4 5 6 7 8 9 10",
    "The mitochondria is the powerhouse of the cell.",
    "Rain is expected tomorrow afternoon.",
    "She sells sea shells by the sea shore.",
    "An apple a day keeps the doctor away.",
    "The stock market closed higher on Friday.",
    "Please remember to water the plants while I am away for the weekend.",
    "Mount Everest is the highest mountain above sea level.",
    "C is a general-purpose programming language.",
    "Good morning!",
    "The library opens at nine and closes at five.",
    "Light travels at about three hundred thousand kilometres per second.",
]


@pytest.fixture(scope="module")
def dim(client, model_id):
    return len(client.embeddings.create(model=model_id, input="x", encoding_format="float").data[0].embedding)


def post(server, body):
    req = urllib.request.Request(server.base + "/v1/embeddings", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def tokens(server, text):
    req = urllib.request.Request(server.base + "/tokenize", data=json.dumps({"prompt": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["tokens"]


def test_batched_equals_one_at_a_time(server, client, model_id, dim):
    assert len(TEXTS) == 32
    # a generation runs beside the batch
    done = []
    gen = threading.Thread(target=lambda: done.append(client.completions.create(
        model=model_id, prompt="Once upon a time", max_tokens=24, temperature=0)))
    gen.start()
    r = client.embeddings.create(model=model_id, input=TEXTS, encoding_format="float")
    gen.join()
    assert done and done[0].choices[0].text
    assert r.object == "list" and r.model == model_id and len(r.data) == 32
    for i, d in enumerate(r.data):
        assert d.object == "embedding" and d.index == i and len(d.embedding) == dim
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1.0) < 1e-4
    n_tok = sum(len(tokens(server, t)) for t in TEXTS)
    assert r.usage.prompt_tokens == n_tok and r.usage.total_tokens == n_tok
    for i, t in enumerate(TEXTS):
        one = client.embeddings.create(model=model_id, input=t, encoding_format="float")
        assert len(one.data) == 1 and one.data[0].index == 0
        # Q4_1 weights on the CPU: every row is batch-independent, bit for bit
        assert one.data[0].embedding == r.data[i].embedding, f"input {i} differs alone"
    # different texts, different vectors; similar meaning closer than unrelated
    e = [d.embedding for d in r.data]
    assert e[0] != e[1]


def test_base64_and_token_ids(server, client, model_id, dim):
    texts = TEXTS[:3]
    flt = client.embeddings.create(model=model_id, input=texts, encoding_format="float")
    # the SDK asks for base64 by default and decodes it
    sdk = client.embeddings.create(model=model_id, input=texts)
    assert [d.embedding for d in sdk.data] == [d.embedding for d in flt.data]
    status, raw = post(server, {"model": model_id, "input": texts, "encoding_format": "base64"})
    assert status == 200
    for d, f in zip(raw["data"], flt.data):
        v = list(struct.unpack("<%df" % dim, base64.b64decode(d["embedding"])))
        assert v == f.embedding
    ids = [tokens(server, t) for t in texts]
    by_ids = client.embeddings.create(model=model_id, input=ids, encoding_format="float")
    assert [d.embedding for d in by_ids.data] == [d.embedding for d in flt.data]
    one = client.embeddings.create(model=model_id, input=ids[1], encoding_format="float")
    assert one.data[0].embedding == flt.data[1].embedding
    assert one.usage.prompt_tokens == len(ids[1])
    # `user` is accepted; `dimensions` equal to the model's own size changes nothing
    same = client.embeddings.create(model=model_id, input=texts[0], encoding_format="float", user="u-1",
                                    dimensions=dim)
    assert same.data[0].embedding == flt.data[0].embedding


def test_last_token_pooling(client, model_id):
    mean = client.embeddings.create(model=model_id, input=TEXTS[:2], encoding_format="float")
    last = client.embeddings.create(model=model_id, input=TEXTS[:2], encoding_format="float",
                                    extra_body={"pooling": "last"})
    for m, l in zip(mean.data, last.data):
        assert m.embedding != l.embedding
        assert abs(math.sqrt(sum(x * x for x in l.embedding)) - 1.0) < 1e-4
    alone = client.embeddings.create(model=model_id, input=TEXTS[1], encoding_format="float",
                                     extra_body={"pooling": "last"})
    assert alone.data[0].embedding == last.data[1].embedding


def test_refusals(server, client, model_id, dim):
    def bad(param, **kw):
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=model_id, encoding_format="float", **kw)
        body = e.value.body if isinstance(e.value.body, dict) else {}
        assert e.value.status_code == 400
        if param:
            assert body.get("param") == param, body
        return body.get("message", "")

    assert "dimensions" in bad("dimensions", input="hello", dimensions=dim // 2)
    bad("input", input="")
    bad("input", input=[])
    bad("input", input=[[]])
    bad("input", input=[[1, 2], "text"])
    bad("input", input=[10 ** 9])
    bad("pooling", input="hello", extra_body={"pooling": "max"})
    _, models = server.get("/v1/models")
    n_ctx = json.loads(models)["data"][0]["max_model_len"]
    msg = bad("input", input=[5] * (n_ctx + 1))
    assert "context" in msg and str(n_ctx) in msg
    status, body = post(server, {"model": model_id, "input": "hello", "encoding_format": "hex"})
    assert status == 400 and body["error"]["param"] == "encoding_format"
    status, body = post(server, {"model": model_id})
    assert status == 400 and body["error"]["param"] == "input"
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="hello")
    # an input of exactly the context fits: nothing is generated after it
    ok = client.embeddings.create(model=model_id, input=[5] * n_ctx, encoding_format="float")
    assert ok.usage.prompt_tokens == n_ctx


def test_metrics(server, client, model_id):
    before = server.metric("weft_embedding_requests_total")
    toks = server.metric("weft_embedding_tokens_total")
    r = client.embeddings.create(model=model_id, input=["a b c", "d e f"])
    assert server.metric("weft_embedding_requests_total") == before + 2
    assert server.metric("weft_embedding_tokens_total") == toks + r.usage.prompt_tokens
    assert server.metric("weft_requests_total", {"endpoint": "/v1/embeddings", "status": "200"}) >= 1
    status, _ = post(server, {"model": model_id})  # its own 400: this test runs alone too
    assert status == 400
    assert server.metric("weft_requests_total", {"endpoint": "/v1/embeddings", "status": "400"}) >= 1


def test_client_gone_frees_everything(server, client, model_id):
    import socket
    import time
    body = json.dumps({"model": model_id, "input": TEXTS * 4}).encode()
    s = socket.create_connection((server.host, server.port), timeout=30)
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    # the client leaves with a reset: a FIN alone is a half-close, whose
    # answer is computed and sent (docs/security.md)
    import struct
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    # the inputs are aborted when the server sees the connection reset; at
    # worst (it answered first) they are all computed: minutes under ASan
    # (idle for 1.5 s running: right after the reset the server may not have
    # read the request yet, and "nothing running" then says nothing)
    deadline = time.time() + (300 if SANITIZED else 60)
    idle_since = None
    while time.time() < deadline:
        idle = server.metric("weft_requests_running") == 0 and server.metric("weft_requests_waiting") == 0 \
            and server.metric("weft_kv_blocks_used") == 0
        idle_since = (idle_since or time.time()) if idle else None
        if idle_since and time.time() - idle_since >= 1.5:
            break
        time.sleep(0.05)
    assert server.metric("weft_kv_blocks_used") == 0
    # and the server goes on answering
    r = client.embeddings.create(model=model_id, input="still here", encoding_format="float")
    assert len(r.data) == 1


@pytest.mark.skipif(SANITIZED, reason="the router's pass-through runs in the Release build")
def test_through_the_router_in_front_of_two(server, client, model_id):
    """The same SDK call through weft router in front of two instances: 32
    inputs at once and one at a time equal what one instance answers."""
    from conftest import Router
    a = Server("-c", "256", threads=1, cpu=0)
    b = Server("-c", "256", threads=1, cpu=1)
    r = None
    try:
        r = Router([a, b])
        r.wait_ready(n_up=2)
        rc = openai.OpenAI(base_url=r.base + "/v1", api_key="none", max_retries=0, timeout=120)
        want = client.embeddings.create(model=model_id, input=TEXTS, encoding_format="float")
        got = rc.embeddings.create(model=model_id, input=TEXTS)  # the SDK's default: base64
        assert [d.embedding for d in got.data] == [d.embedding for d in want.data]
        assert got.usage.prompt_tokens == want.usage.prompt_tokens
        for i in (0, 17, 31):
            one = rc.embeddings.create(model=model_id, input=TEXTS[i], encoding_format="float")
            assert one.data[0].embedding == want.data[i].embedding
    finally:
        if r:
            r.stop()
        b.stop()
        a.stop()
