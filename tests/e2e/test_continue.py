"""Continuations on one instance (weft.continue): a stream cut after k tokens
and carried on from those k token ids equals the uninterrupted stream, for
greedy and seeded sampling, with penalties, logprobs, stop strings (k inside
a held-back one) and usage; the effective seed of an unseeded request is
reported. This is what the router's migration relies on."""
import http.client
import json

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    s.stop()


def stream(srv, path, body):
    """POST a streamed request; returns (headers, chunks) where a chunk is
    the decoded JSON of one data line (the usage chunk included)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    assert r.status == 200, data
    chunks, done = [], False
    for line in data.split("\n"):
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            continue
        chunks.append(json.loads(line[6:]))
    assert done, data[-300:]
    return {k.lower(): v for k, v in r.getheaders()}, chunks


def text_of(ch, chat):
    if not ch["choices"]:
        return ""
    c = ch["choices"][0]
    return (c["delta"].get("content") or "") if chat else c["text"]


def summary(chunks, chat):
    """Per chunk: (text, ids, logprob entries); and the end: finish, usage, roles."""
    per, finish, usage, roles = [], None, None, 0
    for ch in chunks:
        if ch.get("usage"):
            usage = ch["usage"]
        if not ch["choices"]:
            continue
        c = ch["choices"][0]
        if chat and c["delta"].get("role"):
            roles += 1
        lp = c.get("logprobs")
        entries = []
        if lp:
            entries = lp["content"] if chat else list(zip(lp["tokens"], lp["token_logprobs"]))
        per.append((text_of(ch, chat), ch.get("weft", {}).get("ids", []), entries))
        if c["finish_reason"]:
            finish = c["finish_reason"]
    return per, finish, usage, roles


def cut_and_continue(srv, path, body, chat, ks=None, need_held=True):
    """Run body uninterrupted (with weft.ids), then for each chunk boundary k
    send the continuation from the first k ids and check the client would see
    exactly the uninterrupted stream. Returns the ks where text was held back."""
    b = dict(body, stream=True, stream_options={"include_usage": True}, weft={"ids": True})
    hdr, chunks = stream(srv, path, b)
    seed = chunks[0]["weft"]["seed"]
    assert int(hdr["x-weft-seed"]) == seed
    if "seed" in body:
        assert seed == body["seed"]
    rid, created = chunks[0]["id"], chunks[0]["created"]
    per, finish, usage, roles = summary(chunks, chat)
    all_ids = [i for _, ids, _ in per for i in ids]
    full = "".join(t for t, _, _ in per)
    assert usage["completion_tokens"] == len(all_ids)
    assert not chat or roles == 1
    # chunk boundaries: after chunk j the client has text[:sent_j] and the router ids[:k_j]
    bounds, k, sent = [], 0, 0
    for t, ids, _ in per:
        k += len(ids)
        sent += len(t)
        bounds.append((k, sent))
    held = []
    tok_text = {}
    for k, sent in sorted(set(bounds)):
        if ks is not None and k not in ks and k != len(all_ids):
            continue
        cb = dict(b, seed=seed, weft={"ids": True, "continue": all_ids[:k], "id": rid, "created": created})
        _, cchunks = stream(srv, path, cb)
        cper, cfinish, cusage, croles = summary(cchunks, chat)
        ctext = "".join(t for t, _, _ in cper)
        cids = [i for _, ids, _ in cper for i in ids]
        assert full[:sent] + ctext == full, (k, full[:sent], ctext, full)
        assert all_ids[:k] + cids == all_ids, k
        assert cfinish == finish and cusage["completion_tokens"] == usage["completion_tokens"], (k, cfinish, cusage)
        assert cusage["prompt_tokens"] == usage["prompt_tokens"]
        assert all(ch["id"] == rid and ch["created"] == created for ch in cchunks)
        # no second role: the continued stream had one already once anything was sent
        if chat:
            assert croles == (1 if k == 0 else 0) or (sent == 0 and croles <= 1), (k, croles)
        # logprobs of the continued tokens are the uninterrupted ones
        want_lp = [e for _, ids, es in per for e in es][k:]
        got_lp = [e for _, _, es in cper for e in es]
        assert len(got_lp) == len(want_lp)
        for g, w in zip(got_lp, want_lp):
            if chat:
                assert g["token"] == w["token"] and abs(g["logprob"] - w["logprob"]) < 1e-4
            else:
                assert g[0] == w[0] and abs(g[1] - w[1]) < 1e-4
        if k not in tok_text:
            tok_text[k] = sent
        # text the instance held back at k (it had generated more than it sent)
        _, dt = srv_detok(srv, all_ids[:k])
        if len(dt.encode()) > len(full[:sent].encode()) and k < len(all_ids):
            held.append(k)
    if need_held:
        assert held, "no cut landed inside a held-back stop string"
    return held, finish


def srv_detok(srv, ids):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.request("POST", "/detokenize", json.dumps({"tokens": ids}), {"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    return r.status, j["prompt"]


def pick_stop(srv, path, body, chat):
    """A stop string from the middle of the greedy/seeded output, spanning tokens."""
    _, chunks = stream(srv, path, dict(body, stream=True))
    text = "".join(text_of(ch, chat) for ch in chunks)
    assert len(text) > 60, text
    at = len(text) // 2
    while at < len(text) and text[at] != " ":
        at += 1
    return text[at:at + 12]


def test_greedy_completion_continues_exactly_with_logprobs_and_stop_string(srv):
    body = {"prompt": "The history of the city of Paris", "max_tokens": 48, "temperature": 0, "logprobs": 2,
            "ignore_eos": True}
    stop = pick_stop(srv, "/v1/completions", body, False)
    held, finish = cut_and_continue(srv, "/v1/completions", dict(body, stop=[stop, "zzzz-not-there"]), False)
    assert finish == "stop"


def test_seeded_chat_with_penalties_continues_exactly(srv):
    body = {"messages": [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}],
            "max_tokens": 40, "temperature": 0.9, "top_p": 0.95, "seed": 1234, "frequency_penalty": 0.6,
            "presence_penalty": 0.3, "ignore_eos": True}
    stop = pick_stop(srv, "/v1/chat/completions", body, True)
    held, finish = cut_and_continue(srv, "/v1/chat/completions",
                                    dict(body, stop=[stop], logprobs=True, top_logprobs=2), True)
    assert finish == "stop"
    # without a stop string it runs to max_tokens; every chunk boundary, no logprobs
    held, finish = cut_and_continue(srv, "/v1/chat/completions", body, True, need_held=False)
    assert finish == "length"


def test_unseeded_request_reports_its_seed_and_continues_with_it(srv):
    body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.0, "ignore_eos": True, "logprobs": 1}
    _, finish = cut_and_continue(srv, "/v1/completions", body, False, ks={0, 5, 11, 23}, need_held=False)
    assert finish == "length"
    # the reported seed reproduces the stream from scratch as well
    b = dict(body, stream=True, weft={"ids": True})
    h1, c1 = stream(srv, "/v1/completions", b)
    h2, c2 = stream(srv, "/v1/completions", dict(b, seed=int(h1["x-weft-seed"])))
    assert "".join(text_of(c, False) for c in c1) == "".join(text_of(c, False) for c in c2)
    h3, _ = stream(srv, "/v1/completions", b)
    assert h3["x-weft-seed"] != h1["x-weft-seed"]


def test_ordinary_clients_see_no_extension_and_bad_continuations_are_refused(srv):
    _, chunks = stream(srv, "/v1/completions", {"prompt": "Hi", "max_tokens": 4, "stream": True})
    assert all("weft" not in ch for ch in chunks)
    bad = [
        ({"prompt": "Hi", "max_tokens": 4, "weft": {"continue": [1, 2]}}, "stream"),
        ({"prompt": "Hi", "max_tokens": 2, "stream": True, "weft": {"continue": [1, 2, 3]}}, "max_tokens"),
        ({"prompt": "Hi", "max_tokens": 4, "stream": True, "weft": {"continue": [10 ** 9]}}, "vocabulary"),
        ({"prompt": "Hi", "max_tokens": 4, "stream": True, "weft": {"continue": ["a"]}}, "token ids"),
        ({"prompt": "Hi", "stream": True, "weft": {"bogus": 1}}, "unknown field"),
        ({"prompt": "Hi", "stream": True, "weft": {"id": "a\"b"}}, "weft.id"),
    ]
    for body, words in bad:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        j = json.loads(r.read())
        c.close()
        assert r.status == 400 and words in j["error"]["message"], (body, j)
        assert j["error"]["param"] in ("weft", "ids", "continue")
