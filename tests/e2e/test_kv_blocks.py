"""KV blocks between two real instances through /v1/kv/blocks (format v3):
blocks instance A computed, fetched by hash and pushed to instance B, serve
B's prompt (cached tokens, the imported-hit counter, prefill computed only
past them) with A's greedy answer; only a trusted key may fetch or push;
a corrupt stream and another model's are refused and counted."""
import http.client
import json
import os
import tempfile

import pytest

import kvb
from conftest import ROOT, Server

PEER = "sk-kv-peer-000001"
USER = "sk-kv-user-000001"
STORIES = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
PROMPT = ("The lighthouse keeper climbed the stairs every evening, counting each step aloud. " * 6).strip()


def call(srv, method, path, body=None, key=PEER, ctype="application/json"):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    data = json.dumps(body) if isinstance(body, dict) else body
    c.request(method, path, data, {"Content-Type": ctype, "Authorization": "Bearer " + key})
    r = c.getresponse()
    out = r.read()
    headers = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, headers, out


def complete(srv):
    st, _, out = call(srv, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 0,
                                                       "ignore_eos": True}, key=USER)
    assert st == 200, out
    return json.loads(out)


def chain(srv):
    """The hash chain of the one prompt the instance has seen, from its /v1/kv/index."""
    st, idx = srv.get("/v1/kv/index")
    assert st == 200
    child = {parent: h for h, parent in json.loads(idx)["blocks"]}
    out, h = [], "0" * 16
    while h in child:
        h = child[h]
        out.append(h)
    return out


@pytest.fixture(scope="module")
def pair():
    cfg = {"tenants": [{"name": "peer", "api_keys": [PEER], "trusted": True},
                       {"name": "user", "api_keys": [USER]}]}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    a = Server("--config", path, threads=1, cpu=0)
    b = Server("--config", path, threads=1, cpu=1)
    yield a, b, path
    a.stop()
    b.stop()
    os.unlink(path)


def test_blocks_from_one_instance_serve_the_prompt_on_another(pair):
    a, b, _ = pair
    ref = complete(a)
    hashes = chain(a)
    assert len(hashes) >= 4
    # an ordinary key may not read blocks (they hold another tenant's prompt) or push them
    assert call(a, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes), key=USER)[0] == 403
    st, h, stream = call(a, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes))
    assert st == 200 and h["content-type"] == "application/x-weft-kv-blocks"
    assert int(h["x-weft-kv-blocks"]) == len(hashes) and stream[:7] == b"WEFTKVB"
    # ... nor make it take in a large body: past the ordinary body limit, refused before it is read
    assert len(stream) > 1 << 20
    assert call(b, "POST", "/v1/kv/blocks", stream, key=USER, ctype="application/x-weft-kv-blocks")[0] == 413
    assert call(b, "POST", "/v1/kv/blocks", stream[:1000], key=USER, ctype="application/x-weft-kv-blocks")[0] == 403
    st, _, out = call(b, "POST", "/v1/kv/blocks", stream, ctype="application/x-weft-kv-blocks")
    assert st == 200 and json.loads(out) == {"imported": len(hashes), "already": 0, "converted": 0,
                                             "complete": True}, out
    pf0 = b.metric("weft_prefill_tokens_total")
    got = complete(b)
    assert got["choices"][0]["text"] == ref["choices"][0]["text"]
    n = got["usage"]["prompt_tokens"]
    served = min(len(hashes), (n - 1) // 16) * 16
    assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == served
    assert b.metric("weft_kv_imported_hit_tokens_total") == served
    assert b.metric("weft_prefill_tokens_total") - pf0 == n - served
    assert b.metric("weft_kv_transfer_blocks_total", {"direction": "in"}) == len(hashes)
    assert a.metric("weft_kv_transfer_blocks_total", {"direction": "out"}) == len(hashes)
    # the same push again: all already held
    st, _, out = call(b, "POST", "/v1/kv/blocks", stream, ctype="application/x-weft-kv-blocks")
    assert st == 200 and json.loads(out)["already"] == len(hashes)


def test_bad_requests_and_bad_blocks_are_refused_and_counted(pair):
    a, b, path = pair
    complete(a)
    hashes = chain(a)
    assert call(a, "GET", "/v1/kv/blocks")[0] == 400
    assert call(a, "GET", "/v1/kv/blocks?hashes=12xyz")[0] == 400
    # a hash it does not hold: a header and no blocks
    st, h, empty = call(a, "GET", "/v1/kv/blocks?hashes=" + "1" * 16)
    assert st == 200 and h["x-weft-kv-blocks"] == "0" and len(empty) == kvb.header(empty)["header_bytes"]
    _, _, stream = call(a, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes))
    bad = bytearray(stream)
    hb = kvb.header(stream)["header_bytes"]
    rec = (len(stream) - hb) // len(hashes)
    bad[hb + rec + 200] ^= 0x40  # inside the second block's payload
    before = b.metric("weft_kv_rejected_total", {"what": "block"})
    st, _, out = call(b, "POST", "/v1/kv/blocks", bytes(bad), ctype="application/x-weft-kv-blocks")
    err = json.loads(out)["error"]
    assert st == 400 and err["code"] == "kv_blocks_rejected" and "CRC" in err["message"], out
    assert b.metric("weft_kv_rejected_total", {"what": "block"}) == before + 1
    st, _, out = call(b, "POST", "/v1/kv/blocks", stream[:-5], ctype="application/x-weft-kv-blocks")
    assert st == 400 and b.metric("weft_kv_rejected_total", {"what": "stream"}) >= 1
    st, _, out = call(b, "POST", "/v1/kv/blocks", b"not a kv stream", ctype="application/x-weft-kv-blocks")
    assert st == 400
    if os.path.exists(STORIES):
        other = Server("--config", path, model=STORIES, threads=1)
        try:
            st, _, out = call(other, "POST", "/v1/kv/blocks", stream, ctype="application/x-weft-kv-blocks")
            assert st == 409 and json.loads(out)["error"]["code"] == "kv_blocks_foreign", out
            assert other.metric("weft_kv_rejected_total", {"what": "stream"}) == 1
            assert other.metric("weft_kv_transfer_blocks_total", {"direction": "in"}) == 0
        finally:
            other.stop()
