"""The OpenAI API's rough edges, driven by the official openai package against
`weft serve` and against `weft router` in front of two instances (the same
calls must work through both): models.retrieve and model aliases, the
created time of each answer, CORS preflights and headers, n > 1 choices
(sharing the prompt's KV blocks: the prefix-hit counter shows it), a single
--api-key, and the queue-full message."""
import http.client
import json
import re
import time

import pytest

from conftest import Router, Server, open_stream

openai = pytest.importorskip("openai")

ORIGIN = "http://app.example"
ALIAS = "gpt-4o-mini"
# long enough for two full KV blocks (16 tokens each) in any template
LONG = ("The history of the city of Paris spans more than two thousand years, from a small settlement "
        "of the Parisii on an island in the Seine to the capital of France. Tell me about it:")


@pytest.fixture(scope="module")
def instances():
    a = Server("--model-alias", ALIAS, "--cors-origin", ORIGIN, threads=1)
    try:
        b = Server("--model-alias", ALIAS, "--cors-origin", ORIGIN, threads=1)
    except Exception:
        a.stop()
        raise
    yield a, b
    b.stop()
    a.stop()


@pytest.fixture(scope="module")
def router(instances):
    r = Router(list(instances), "--cors-origin", ORIGIN)
    r.wait_ready(n_up=2)
    yield r
    r.stop()


@pytest.fixture(params=["serve", "router"])
def target(request, instances):
    """A base URL: one instance, or the router in front of both."""
    if request.param == "serve":
        return instances[0]
    return request.getfixturevalue("router")


def sdk(t, key="none"):
    return openai.OpenAI(base_url=t.base + "/v1", api_key=key, max_retries=0, timeout=120)


def raw(t, method, path, headers=None, body=None):
    """(status, lower-cased headers, body text) of one request."""
    c = http.client.HTTPConnection(t.host, t.port, timeout=60)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def model_id(t):
    return sdk(t).models.list().data[0].id


def prefix_hits(servers):
    return sum(s.metric("weft_prefix_cache_hit_tokens_total") for s in servers)


# ---- models ----

def test_models_retrieve_and_aliases(target, instances):
    c = sdk(target)
    mid = model_id(instances[0])
    m = c.models.retrieve(mid)
    assert m.id == mid and m.object == "model" and m.owned_by == "weft" and isinstance(m.created, int)
    assert c.models.retrieve(ALIAS).id == ALIAS  # an alias resolves (through the router: asked of an instance)
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    err = e.value.body
    assert "no-such-model" in err["message"] and err["code"] == "model_not_found" and err["param"] == "model"
    ids = [x.id for x in c.models.list().data]
    assert mid in ids
    if target is instances[0]:
        assert ids == [mid, ALIAS]


def test_an_alias_is_accepted_and_reported(target):
    c = sdk(target)
    r = c.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert r.model == ALIAS
    chunks = list(c.completions.create(model=ALIAS, prompt="The sky is", max_tokens=3, stream=True))
    assert chunks and all(ch.model == ALIAS for ch in chunks)


# ---- created ----

def test_created_is_when_the_request_came(target):
    c = sdk(target)
    before = int(time.time())
    r = c.completions.create(model=ALIAS, prompt="One, two,", max_tokens=2)
    chunks = list(c.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "Count"}],
                                            max_tokens=3, stream=True))
    after = int(time.time())
    assert before <= r.created <= after
    assert len({ch.created for ch in chunks}) == 1 and before <= chunks[0].created <= after


# ---- CORS ----

def test_cors_preflight_and_headers(target):
    st, h, _ = raw(target, "OPTIONS", "/v1/chat/completions", {
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, x-stainless-lang, x-other"})
    assert st == 204
    assert h["access-control-allow-origin"] == ORIGIN and "origin" in h["vary"].lower()
    assert "POST" in h["access-control-allow-methods"] and int(h["access-control-max-age"]) > 0
    allowed = [x.strip().lower() for x in h["access-control-allow-headers"].split(",")]
    assert allowed == ["authorization", "content-type", "x-stainless-os", "x-stainless-lang"]
    # another origin: refused, and no CORS header says otherwise
    st, h, _ = raw(target, "OPTIONS", "/v1/chat/completions",
                   {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert st == 403 and "access-control-allow-origin" not in h
    # ordinary and streamed answers carry it for the allowed origin only
    st, h, _ = raw(target, "GET", "/v1/models", {"Origin": ORIGIN})
    assert st == 200 and h["access-control-allow-origin"] == ORIGIN
    st, h, _ = raw(target, "GET", "/v1/models", {"Origin": "http://evil.example"})
    assert st == 200 and "access-control-allow-origin" not in h
    st, h, body = raw(target, "POST", "/v1/chat/completions", {"Origin": ORIGIN, "Content-Type": "application/json"},
                      {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True})
    assert st == 200 and h["access-control-allow-origin"] == ORIGIN and body.rstrip().endswith("data: [DONE]")
    st, h, _ = raw(target, "GET", "/v1/models/nope", {"Origin": ORIGIN})
    assert st == 404 and h["access-control-allow-origin"] == ORIGIN  # errors too: the browser can read them


def test_no_cors_without_the_flag():
    s = Server(threads=1)
    try:
        st, h, _ = raw(s, "GET", "/v1/models", {"Origin": ORIGIN})
        assert st == 200 and not any(k.startswith("access-control-") for k in h)
        st, h, _ = raw(s, "OPTIONS", "/v1/models", {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
        assert st in (404, 405) and not any(k.startswith("access-control-") for k in h)
    finally:
        s.stop()


# ---- n > 1 ----

def test_n_choices_completions(target, instances):
    c = sdk(target)
    kw = dict(model=ALIAS, prompt=LONG + " " + target.__class__.__name__, max_tokens=5, seed=1234, temperature=1.0,
              extra_body={"ignore_eos": True})
    hits0 = prefix_hits(instances)
    r = c.completions.create(n=3, **kw)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2]
    assert all(ch.finish_reason == "length" for ch in r.choices)
    one = c.completions.create(n=1, **kw)
    assert r.usage.prompt_tokens == one.usage.prompt_tokens >= 33  # the prompt counted once
    assert r.usage.completion_tokens == 15 and r.usage.total_tokens == r.usage.prompt_tokens + 15
    # the 2nd and 3rd choices found the 1st's prompt blocks in the prefix cache
    assert prefix_hits(instances) - hits0 >= 2 * 32
    # choice i samples with seed + i: what a one-choice request with that seed draws
    by_index = {ch.index: ch.text for ch in r.choices}
    assert by_index[0] == one.choices[0].text
    assert by_index[2] == c.completions.create(n=1, **dict(kw, seed=1236)).choices[0].text


def test_n_choices_chat_streamed(target):
    c = sdk(target)
    stream = c.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": LONG}], n=2, max_tokens=4,
                                       stream=True, stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    text, finish, roles, usage = {0: "", 1: ""}, {}, set(), None
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            if choice.delta.role:
                roles.add(choice.index)
            text[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert roles == {0, 1} and finish == {0: "length", 1: "length"}
    assert all(text.values())
    assert usage.completion_tokens == 8


def test_n_over_16_is_a_named_400(target):
    with pytest.raises(openai.BadRequestError) as e:
        sdk(target).completions.create(model=ALIAS, prompt="x", max_tokens=1, n=17)
    assert e.value.body["param"] == "n"


# ---- the router's other routes ----

def test_router_proxies_embeddings(router, instances):
    """POST /v1/embeddings goes to an instance as it is: the router answers
    what the instance answers."""
    body = {"model": ALIAS, "input": ["hello", "world"]}
    st_i, _, b_i = raw(instances[0], "POST", "/v1/embeddings", {"Content-Type": "application/json"}, body)
    st_r, h_r, b_r = raw(router, "POST", "/v1/embeddings", {"Content-Type": "application/json"}, body)
    assert st_r == st_i and "x-weft-instance" in h_r
    if st_i == 200:
        assert len(json.loads(b_r)["data"]) == 2
    else:
        assert json.loads(b_r)["error"]["message"] == json.loads(b_i)["error"]["message"]


# ---- --api-key ----

def test_single_api_key_on_serve_and_router():
    key = "sk-weft-test-0123"
    a = Server("--api-key", key, threads=1)
    r = None
    try:
        with pytest.raises(openai.AuthenticationError):
            sdk(a, "wrong-key-9999").models.list()
        st, h, _ = raw(a, "GET", "/v1/models")
        assert st == 401 and h.get("www-authenticate") == "Bearer"
        assert a.get("/health")[0] == 200 and a.get("/ready")[0] == 200 and a.get("/metrics")[0] == 200
        out = sdk(a, key).completions.create(model="default", prompt="Hello", max_tokens=2)
        assert out.usage.completion_tokens >= 1
        # the router checks the same key and sends it on to the instance
        r = Router([a], "--api-key", key)
        r.wait_ready(n_up=1)
        with pytest.raises(openai.AuthenticationError):
            sdk(r).completions.create(model="default", prompt="Hello", max_tokens=2)
        out = sdk(r, key).chat.completions.create(model="default", messages=[{"role": "user", "content": "Hi"}],
                                                  max_tokens=2)
        assert out.choices[0].message.role == "assistant"
        assert r.get("/health")[0] == 200
    finally:
        if r:
            r.stop()
        a.stop()


# ---- a full queue ----

def test_queue_full_message_is_plain():
    srv = Server("--max-seqs", "1", "--max-waiting", "1", threads=1)
    socks = []
    try:
        for i, name in enumerate(("weft_requests_running", "weft_requests_waiting")):
            socks.append(open_stream(srv.port, f"Number {i}:", 4000))
            deadline = time.time() + 60
            while time.time() < deadline and srv.metric(name) != 1:
                time.sleep(0.02)
        with pytest.raises(openai.APIStatusError) as e:
            sdk(srv).completions.create(model="default", prompt="x", max_tokens=1)
        assert e.value.status_code == 503
        msg = e.value.body["message"]
        assert re.match(r"the server is busy: \d+ requests are already waiting; retry in \d+ s$", msg), msg
        assert int(e.value.response.headers["retry-after"]) >= 1
    finally:
        for s in socks:
            s.close()
        srv.stop()
