"""/v1/completions with a prompt array (OpenAI's batch form): each prompt
gets its n choices, indexed prompt * n + j, each the answer that prompt
alone gets; usage counts every prompt; streamed and not; prompts as
strings or as token ids; directly and through weft router."""
import json
import urllib.request

import pytest

from conftest import Router, Server

PROMPTS = ["The capital of France is", "Once upon a time", "1, 2, 3,"]


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            if body.get("stream"):
                chunks = []
                for line in r:
                    line = line.decode().strip()
                    if line.startswith("data: ") and line != "data: [DONE]":
                        chunks.append(json.loads(line[6:]))
                return 200, chunks
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def bases():
    srv = Server(threads=2)
    r = Router([srv])
    r.wait_ready(n_up=1)
    yield {"serve": srv.base, "router": r.base}
    r.stop()
    srv.stop()


@pytest.mark.parametrize("where", ["serve", "router"])
def test_each_prompt_gets_its_choices(bases, where):
    base = bases[where]
    alone = []
    for p in PROMPTS:
        st, r = post(base, {"prompt": p, "max_tokens": 6, "temperature": 0})
        assert st == 200
        alone.append(r)
    st, r = post(base, {"prompt": PROMPTS, "max_tokens": 6, "temperature": 0, "n": 2})
    assert st == 200, r
    ch = sorted(r["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in ch] == list(range(6))
    for i, c in enumerate(ch):
        assert c["text"] == alone[i // 2]["choices"][0]["text"], (i, c)
    assert r["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
    assert r["usage"]["completion_tokens"] == 2 * sum(a["usage"]["completion_tokens"] for a in alone)
    # streamed: every choice's pieces, by index
    st, chunks = post(base, {"prompt": PROMPTS, "max_tokens": 6, "temperature": 0, "stream": True})
    text = {}
    for k in chunks:
        for c in k["choices"]:
            text[c["index"]] = text.get(c["index"], "") + c["text"]
    assert [text[i] for i in range(3)] == [a["choices"][0]["text"] for a in alone]
    # token ids: the same answers
    ids = []
    for p in PROMPTS:
        req = urllib.request.Request(base + "/tokenize", data=json.dumps({"prompt": p}).encode(),
                                     headers={"Content-Type": "application/json"})
        ids.append(json.loads(urllib.request.urlopen(req, timeout=30).read())["tokens"])
    st, r = post(base, {"prompt": ids, "max_tokens": 6, "temperature": 0})
    assert st == 200 and [c["text"] for c in sorted(r["choices"], key=lambda c: c["index"])] == \
        [a["choices"][0]["text"] for a in alone]


def test_prompt_arrays_refusals(bases):
    base = bases["serve"]
    for body, param in [({"prompt": ["a", [1, 2]]}, "prompt"), ({"prompt": ["a", ""]}, "prompt"),
                        ({"prompt": ["a", "b"], "echo": True}, "echo"),
                        ({"prompt": ["x"] * 65}, "prompt"), ({"prompt": ["a", "b"], "n": 40}, "n")]:
        st, e = post(base, {**body, "max_tokens": 2})
        assert st == 400 and e["error"]["param"] == param, (body, e)
