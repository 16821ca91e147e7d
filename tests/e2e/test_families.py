"""A family other than llama through the whole stack: weft serve, the router,
prefill/decode hand-off, KV reuse through Redis, and embeddings, on the
random-weight qwen3 model of ../shared/models/arch/ (QK-norm, NEOX rope, head
dim 64 with a q width of 512 != n_embd). The oracle is one instance: PD
greedy answers equal its answers; a prefix computed on one instance is served
on another from Redis (counted); embeddings of a batch equal each alone."""
import json
import os
import time
import urllib.request

import pytest

from conftest import ROOT, Router, Server
from test_kv_remote import REDIS, Redis, complete, wait_metric
from test_pd import prompt_of, tail_tokens

MODEL = os.path.join(os.path.dirname(ROOT), "shared", "models", "arch", "qwen3-F16.gguf")
pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason=f"no {MODEL}")


def post(srv, path, body):
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_pd_hand_off_on_qwen3_gives_one_instances_tokens():
    p = Server("--role", "prefill", "-c", "2048", model=MODEL, threads=1, cpu=0)
    d = Server("--role", "decode", "-c", "2048", "--pd-idle-ms", "30000", model=MODEL, threads=1, cpu=1)
    o = Server("-c", "2048", model=MODEL, threads=1, cpu=1)
    r = Router([p, d], "--pd-threshold", "64", "--pd-slack", "8")
    try:
        r.wait_ready(n_up=2)
        for i, n_words in enumerate((40, 90)):
            text = prompt_of(i, n_words)
            got = complete(r, text)
            ref = complete(o, text)
            n = got["usage"]["prompt_tokens"]
            assert n >= 64
            assert got["choices"][0]["text"] == ref["choices"][0]["text"]
            assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == n - tail_tokens(n)
        assert d.metric("weft_pd_requests_total", {"outcome": "complete"}) == 2
        assert r.metric("weft_router_pd_handoffs_total", {"result": "ok"}) == 2
    finally:
        for s in (r, p, d, o):
            s.stop()


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/install-deps.sh)")
def test_a_qwen3_prefix_is_served_from_redis_and_embeddings_work():
    redis = Redis()
    url = "unix://" + redis.sock
    a = Server("--kv-remote", url, model=MODEL, threads=1, cpu=0)
    b = Server("--kv-remote", url, model=MODEL, threads=1, cpu=1)
    try:
        text = prompt_of(7, 60)
        ref = complete(a, text)
        n = ref["usage"]["prompt_tokens"]
        usable = (n - 1) // 16
        assert wait_metric(a, "weft_kv_remote_written_blocks_total", lambda v: v >= n // 16), "write-behind"
        got = complete(b, text)
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert b.metric("weft_kv_remote_hit_blocks_total") == usable
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == usable * 16
        # embeddings: n_embd floats each, a batch equal to its items alone
        texts = ["the ferry leaves at dawn", "amber basalt cedar"]
        both = post(a, "/v1/embeddings", {"input": texts})["data"]
        assert len(both) == 2 and len(both[0]["embedding"]) == 256
        for i, t in enumerate(texts):
            one = post(a, "/v1/embeddings", {"input": t})["data"][0]["embedding"]
            assert max(abs(x - y) for x, y in zip(one, both[i]["embedding"])) < 1e-4
    finally:
        a.stop()
        b.stop()
        redis.stop()


GEMMA3 = os.path.join(os.path.dirname(ROOT), "shared", "models", "arch", "gemma3-F16.gguf")
GEMMA4_MOE = os.path.join(os.path.dirname(ROOT), "shared", "models", "arch", "gemma4-moe-F16.gguf")
GEMMA4 = os.path.join(os.path.dirname(ROOT), "shared", "models", "arch", "gemma4-F16.gguf")


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/install-deps.sh)")
@pytest.mark.parametrize("model", [GEMMA3, GEMMA4_MOE, GEMMA4], ids=["gemma3", "gemma4-moe", "gemma4"])
def test_gemma3_window_blocks_dropped_through_pd_and_redis(model):
    """Gemma 3 and 4 (window 16): instances drop the blocks that leave each
    sequence's window; a PD hand-off and a Redis reuse of a prompt many
    windows long still give what one instance keeping every block
    (--swa-full) gives, with the whole prefix hit. Gemma 4's sliding layers
    have their own K/V shape (2 heads of 32 beside the global layers' 1 of
    64): the blocks carry both, and --swa-full keeps its window group whole;
    its last layers keep no K/V (they read earlier layers'): SHARED runs."""
    if not os.path.exists(model):
        pytest.skip(f"no {model}")
    GEMMA3 = model
    redis = Redis()
    url = "unix://" + redis.sock
    p = Server("--role", "prefill", "-c", "2048", "--kv-remote", url, model=GEMMA3, threads=1, cpu=0)
    d = Server("--role", "decode", "-c", "2048", "--pd-idle-ms", "30000", model=GEMMA3, threads=1, cpu=1)
    o = Server("-c", "2048", "--swa-full", model=GEMMA3, threads=1, cpu=1)
    r = Router([p, d], "--pd-threshold", "64", "--pd-slack", "8")
    b = None
    try:
        r.wait_ready(n_up=2)
        text = prompt_of(3, 60)
        ref = complete(o, text, max_tokens=80)
        n = ref["usage"]["prompt_tokens"]
        assert n >= 4 * 16
        got = complete(r, text, max_tokens=80)
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == n - tail_tokens(n)
        assert r.metric("weft_router_pd_handoffs_total", {"result": "ok"}) == 1
        assert d.metric("weft_kv_window_dropped_total") > 0
        if "gemma4" in model:  # --swa-full: a window group of its own shape, nothing dropped
            assert o.metric("weft_kv_window_dropped_total") == 0
        else:
            with pytest.raises(KeyError):
                o.metric("weft_kv_window_blocks")  # --swa-full: one group
        # the prefill instance wrote the prompt's blocks (window parts with them) to Redis
        assert wait_metric(p, "weft_kv_remote_written_blocks_total", lambda v: v >= n // 16), "write-behind"
        b = Server("--kv-remote", url, model=GEMMA3, threads=1, cpu=0)
        got = complete(b, text, max_tokens=80)
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16
    finally:
        for s in (r, p, d, o, b, redis):
            if s is not None:
                s.stop()


DEEPSEEK2 = os.path.join(os.path.dirname(ROOT), "shared", "models", "arch", "deepseek2-F16.gguf")


@pytest.mark.skipif(not os.path.exists(DEEPSEEK2), reason=f"no {DEEPSEEK2}")
@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/install-deps.sh)")
def test_deepseek2_latent_cache_through_pd_and_redis():
    """DeepSeek's MLA keeps one latent row per token and layer: (kv_lora_rank 64 + rope 32)
    x 2 layers x 2 bytes (F16) = 384 bytes a token, not K and V per head. A PD hand-off and a
    Redis reuse of its blocks (KV block format v4, a LATENT layout run) give what one
    instance gives, with the whole prefix hit."""
    redis = Redis()
    url = "unix://" + redis.sock
    p = Server("--role", "prefill", "-c", "2048", "--kv-remote", url, model=DEEPSEEK2, threads=1, cpu=0)
    d = Server("--role", "decode", "-c", "2048", "--pd-idle-ms", "30000", model=DEEPSEEK2, threads=1, cpu=1)
    o = Server("-c", "2048", model=DEEPSEEK2, threads=1, cpu=1)
    r = Router([p, d], "--pd-threshold", "64", "--pd-slack", "8")
    b = None
    try:
        r.wait_ready(n_up=2)
        assert o.metric("weft_kv_bytes_per_token") == (64 + 32) * 2 * 2
        text = prompt_of(5, 60)
        ref = complete(o, text, max_tokens=40)
        n = ref["usage"]["prompt_tokens"]
        assert n >= 4 * 16
        got = complete(r, text, max_tokens=40)
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == n - tail_tokens(n)
        assert r.metric("weft_router_pd_handoffs_total", {"result": "ok"}) == 1
        assert wait_metric(p, "weft_kv_remote_written_blocks_total", lambda v: v >= n // 16), "write-behind"
        b = Server("--kv-remote", url, model=DEEPSEEK2, threads=1, cpu=0)
        got = complete(b, text, max_tokens=40)
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert b.metric("weft_kv_remote_hit_blocks_total") == (n - 1) // 16
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16
    finally:
        for s in (r, p, d, o, b, redis):
            if s is not None:
                s.stop()


QWEN35 = os.path.join(os.path.dirname(ROOT), "shared", "models", "arch", "qwen35-F16.gguf")


@pytest.mark.skipif(not os.path.exists(QWEN35), reason=f"no {QWEN35}")
def test_a_hybrid_prefix_hit_resumes_from_a_state_checkpoint():
    """Qwen3.5 (recurrent layers): a repeated prompt resumes from the state checkpoint taken at
    its last full block before its last token (counted; the interval's are every 32 tokens)
    and answers as an instance without a prefix cache."""
    w = Server("-c", "512", "--state-checkpoint", "32", "--state-checkpoint-mib", "4", model=QWEN35, threads=1, cpu=0)
    o = Server("-c", "512", "--no-prefix-cache", model=QWEN35, threads=1, cpu=1)
    try:
        text = prompt_of(5, 20)
        ref = complete(o, text, max_tokens=24)
        n = ref["usage"]["prompt_tokens"]
        assert n > 64
        first = complete(w, text, max_tokens=24)
        again = complete(w, text, max_tokens=24)
        assert first["choices"][0]["text"] == again["choices"][0]["text"] == ref["choices"][0]["text"]
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert (n - 1) // 16 % 2 == 1  # the last full block is past the interval's last
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16
        assert w.metric("weft_state_checkpoint_hits_total") == 1
        assert w.metric("weft_state_checkpoint_tokens") == 32
        assert w.metric("weft_state_checkpoints_stored_total") >= (n - 1) // 32
        with pytest.raises(KeyError):
            o.metric("weft_state_checkpoints")  # no prefix cache: no checkpoints
    finally:
        for s in (w, o):
            s.stop()


@pytest.mark.skipif(not os.path.exists(QWEN35), reason=f"no {QWEN35}")
def test_the_router_sends_a_hybrid_prefix_to_its_checkpoint():
    """Two Qwen3.5 instances behind weft router: a prompt's second sending goes to the
    instance holding its state checkpoint (route header: reason prefix); the router's index
    holds the instance's checkpoints as it holds its blocks (its KV events, "checkpoint"), so
    the predicted match is the block the checkpoint ends (the prompt's last full block, past
    the interval's last), equal to what the instance reports cached, the answer the same."""
    import http.client
    from test_router import post, route_field
    a = Server("-c", "512", "--state-checkpoint", "32", model=QWEN35, threads=1, cpu=0)
    b = Server("-c", "512", "--state-checkpoint", "32", model=QWEN35, threads=1, cpu=1)
    r = Router([a, b], model=QWEN35)
    try:
        r.wait_ready(n_up=2)
        assert json.loads(a.get("/load")[1])["kv"]["state_checkpoint_tokens"] == 32
        conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=120)
        body = {"prompt": prompt_of(5, 20), "max_tokens": 8, "temperature": 0}
        st, h1, d1 = post(conn, "/v1/completions", body)
        assert st == 200
        first = json.loads(d1)
        n = first["usage"]["prompt_tokens"]
        assert (n - 1) // 16 % 2 == 1  # the last full block is past the last checkpoint
        holder = h1["x-weft-instance"]
        srv = a if holder.endswith(f":{a.port}") else b
        assert wait_metric(srv, "weft_state_checkpoints_stored_total", lambda v: v >= (n - 1) // 32)
        # the router's index hears of the blocks through the instance's KV events
        deadline = time.time() + 60
        while r.metric("weft_router_instance_index_blocks", {"instance": holder}) < (n - 1) // 16:
            assert time.time() < deadline, "the router's index did not follow the instance's KV events"
            time.sleep(0.05)
        st, h2, d2 = post(conn, "/v1/completions", body)
        second = json.loads(d2)
        assert h2["x-weft-instance"] == holder and route_field(h2["x-weft-route"], "reason") == "prefix", h2["x-weft-route"]
        assert int(route_field(h2["x-weft-route"], "matched")) == (n - 1) // 16 * 16
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16
        # the instance names its checkpoints in its index snapshot and its event stream
        idx = json.loads(srv.get("/v1/kv/index")[1])
        assert len(idx["checkpoints"]) >= (n - 1) // 32 + 1
        assert second["choices"][0]["text"] == first["choices"][0]["text"]
        assert srv.metric("weft_state_checkpoint_hits_total") >= 1
    finally:
        for s in (r, a, b):
            s.stop()


def complete_lp(srv, text, max_tokens):
    """A greedy completion with each token's logprob."""
    body = {"prompt": text, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "logprobs": 1}
    return post(srv, "/v1/completions", body)


def same_tokens(got, ref, tol=1e-3):
    """Teacher forcing on one greedy path: the same text, each token's logprob within tol."""
    assert got["choices"][0]["text"] == ref["choices"][0]["text"]
    a = got["choices"][0]["logprobs"]["token_logprobs"]
    b = ref["choices"][0]["logprobs"]["token_logprobs"]
    assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol, (a, b)


@pytest.mark.skipif(not os.path.exists(QWEN35), reason=f"no {QWEN35}")
@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/install-deps.sh)")
def test_a_hybrid_through_pd_and_redis_carries_its_state_checkpoint():
    """Qwen3.5 through a PD hand-off and Redis (KV block format v5: STATE runs, the checkpoint
    in the record of the block it ends). The prefill instance checkpoints the state every 32
    tokens and at the prompt's last full block; the hand-off carries only that last one (the
    decode side resumes from it), which the decode instance restores (counted) before
    computing only the tail; a third instance takes the blocks and checkpoints from Redis. Each answers as one instance without a
    prefix cache, token for token with logprobs within 1e-3."""
    redis = Redis()
    url = "unix://" + redis.sock
    p = Server("--role", "prefill", "-c", "1024", "--kv-remote", url, "--state-checkpoint", "32", model=QWEN35,
               threads=1, cpu=0)
    d = Server("--role", "decode", "-c", "1024", "--pd-idle-ms", "30000", model=QWEN35, threads=1, cpu=1)
    o = Server("-c", "1024", "--no-prefix-cache", model=QWEN35, threads=1, cpu=1)
    r = Router([p, d], "--pd-threshold", "64", "--pd-slack", "8")
    b = None
    try:
        r.wait_ready(n_up=2)
        text = prompt_of(6, 40)
        ref = complete_lp(o, text, 24)
        n = ref["usage"]["prompt_tokens"]
        assert 64 <= n < 256
        got = complete_lp(r, text, 24)
        same_tokens(got, ref)
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == n - tail_tokens(n)
        assert r.metric("weft_router_pd_handoffs_total", {"result": "ok"}) == 1
        assert d.metric("weft_state_checkpoints_imported_total") == 1
        assert d.metric("weft_state_checkpoint_hits_total") == 1
        assert p.metric("weft_state_checkpoints_stored_total") == (n - 1) // 32 + ((n - 1) // 16 % 2)
        # the prefill instance wrote the blocks, the last one with its checkpoint, to Redis
        assert wait_metric(p, "weft_kv_remote_written_blocks_total", lambda v: v >= (n - 1) // 16), "write-behind"
        b = Server("-c", "1024", "--kv-remote", url, model=QWEN35, threads=1, cpu=0)
        got = complete_lp(b, text, 24)
        same_tokens(got, ref)
        assert b.metric("weft_kv_remote_hit_blocks_total") == (n - 1) // 16
        assert b.metric("weft_state_checkpoint_hits_total") == 1
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16
    finally:
        for s in (r, p, d, o, b, redis):
            if s is not None:
                s.stop()
