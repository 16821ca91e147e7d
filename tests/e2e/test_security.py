"""weft against a hostile client, peer, Redis and gateway (the security
issue): each case here failed before its fix. A KV stream that claims fewer
layers than the model; a schema that can never end, alone and as a flood
through the router; a client naming a tenant it is not; embeddings that
skipped the router's token budget; a half-closed client; a half-sent header
at SIGTERM; the KV surfaces open to anyone (pushes, PD pushes to any URL,
reads of other users' prompts); blocks forged in Redis; push memory and pins
without a total bound. Assertions are on structure (statuses, counters, exit
codes, connections made); waits are bounded polls."""
import http.client
import json
import os
import re
import signal
import socket
import tempfile
import threading
import time

import pytest

import kvb
from conftest import KV_SECRET, ROOT, Router, Server
from test_kv_remote import wait_metric

STORIES = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
PEER = "sk-sec-peer-0001"
ATTACKER = "sk-sec-attack-01"
INNOCENT = "sk-sec-innocent1"
VIP = "sk-sec-vip-00001"
GATEWAY = "sk-sec-gateway01"
ROUTER_KEY = "sk-sec-router-01"


def need_stories():
    if not os.path.exists(STORIES):
        pytest.skip("stories260K.gguf is not in ../shared/models")


def config(cfg):
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


def call(port, method, path, body=None, key=None, headers=None, ctype="application/json", timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body) if isinstance(body, (dict, list)) else body
    h = {"Content-Type": ctype, **(headers or {})}
    if key:
        h["Authorization"] = "Bearer " + key
    c.request(method, path, data, h)
    r = c.getresponse()
    out = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, out


# ---- 1. a block stream that claims fewer layers than the model -------------

def test_a_stream_of_one_layer_is_refused_and_the_instance_lives():
    """The header names layers 0..0 of the model's five, every CRC good: it
    used to be imported (a whole block's bytes copied from a one-layer
    payload: a heap over-read that killed a fresh instance)."""
    need_stories()
    path = config({"tenants": [{"name": "peer", "api_keys": [PEER], "trusted": True}]})
    a = Server("--config", path, model=STORIES, threads=1)
    b = Server("--config", path, model=STORIES, threads=1)
    try:
        prompt = "Once upon a time there was a little girl who lived in a house by the sea. " * 3
        st, _, out = call(a.port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 4}, key=PEER)
        assert st == 200, out
        hashes = chain_as(a, PEER)
        st, _, stream = call(a.port, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes), key=PEER)
        assert st == 200 and len(hashes) >= 3
        h = kvb.header(stream)
        assert h["n_layer"] >= 2
        for layer0, n_layers in ((0, 1), (1, h["n_layer"] - 1)):
            part = kvb.reframe(stream, layer0, n_layers, KV_SECRET)
            st, _, out = call(b.port, "POST", "/v1/kv/blocks", part, key=PEER, ctype="application/x-weft-kv-blocks")
            err = json.loads(out)["error"]
            assert st == 400 and err["code"] == "kv_blocks_rejected" and "needs all" in err["message"], out
        assert b.get("/health")[0] == 200
        # nothing of it was taken: the blocks are not there to read back
        st, hd, got = call(b.port, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes), key=PEER)
        assert st == 200 and hd["x-weft-kv-blocks"] == "0"
        assert b.metric("weft_kv_rejected_total", {"what": "stream"}) == 2
        assert b.metric("weft_kv_transfer_blocks_total", {"direction": "in"}) == 0
    finally:
        a.stop()
        b.stop()
        os.unlink(path)


# ---- 2. a schema that can never end --------------------------------------

NEVER_ENDS = {"type": "json_schema", "json_schema": {"name": "loop", "schema": {"$ref": "#"}}}
NEVER_ENDS_OBJ = {"type": "json_schema", "json_schema": {"name": "loop2", "schema": {
    "type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}}}
ENDS = {"type": "json_schema", "json_schema": {"name": "tree", "schema": {
    "type": "object", "properties": {"child": {"$ref": "#"}}}}}


def test_a_schema_that_can_never_end_is_the_clients_error():
    need_stories()
    srv = Server(model=STORIES, threads=1)
    try:
        for fmt in (NEVER_ENDS, NEVER_ENDS_OBJ):
            st, h, out = call(srv.port, "POST", "/v1/completions",
                              {"prompt": "x", "max_tokens": 4, "response_format": fmt})
            err = json.loads(out)["error"]
            assert st == 400 and err["param"] == "response_format" and "never end" in err["message"], out
            assert "x-weft-fault" not in h
        # a recursive schema that can end stays valid
        st, _, out = call(srv.port, "POST", "/v1/completions",
                          {"prompt": "x", "max_tokens": 4, "response_format": ENDS})
        assert st == 200, out
        _, text = srv.get("/metrics")
        assert 'endpoint="/v1/completions",status="400"} 2' in text and 'status="500"' not in text, text
    finally:
        srv.stop()


def test_a_flood_of_never_ending_schemas_does_not_take_the_fleet_offline():
    """One key sends self-referencing schemas as fast as it can; another
    sends 2 requests/s. The router used to count each 500 against the
    instance, retry it on every instance and open every circuit breaker."""
    need_stories()
    path = config({"tenants": [{"name": "attacker", "api_keys": [ATTACKER]},
                               {"name": "innocent", "api_keys": [INNOCENT]}]})
    a = Server(model=STORIES, threads=1, cpu=0)
    b = Server(model=STORIES, threads=1, cpu=1)
    router = Router([a, b], "--config", path, model=STORIES)
    router.wait_ready(n_up=2)
    stop = threading.Event()
    attack = {"sent": 0, "statuses": {}}

    def attacker():
        c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=60)
        body = json.dumps({"prompt": "x", "max_tokens": 8, "response_format": NEVER_ENDS})
        while not stop.is_set():
            try:
                c.request("POST", "/v1/completions", body,
                          {"Content-Type": "application/json", "Authorization": "Bearer " + ATTACKER})
                r = c.getresponse()
                r.read()
                attack["sent"] += 1
                attack["statuses"][r.status] = attack["statuses"].get(r.status, 0) + 1
            except (OSError, http.client.HTTPException):
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", router.port, timeout=60)
        c.close()

    threads = [threading.Thread(target=attacker) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        statuses = []
        for i in range(20):  # 2 a second for 10 s
            t0 = time.time()
            st, _, out = call(router.port, "POST", "/v1/completions",
                              {"prompt": f"Once upon a time {i}", "max_tokens": 4}, key=INNOCENT)
            statuses.append(st)
            time.sleep(max(0.0, 0.5 - (time.time() - t0)))
        stop.set()
        for t in threads:
            t.join(60)
        ok = statuses.count(200)
        assert ok >= 19, (statuses, attack)  # >= 95 %
        assert attack["sent"] >= 20 and set(attack["statuses"]) == {400}, attack
        # no breaker opened, nothing retried
        assert router.metric("weft_router_retries_total", {"reason": "5xx"}) == 0
        _, text = router.get("/metrics")
        opens = re.findall(r'^weft_router_circuit_opens_total\{[^}]*\} (\S+)$', text, re.M)
        assert len(opens) == 2 and all(float(v) == 0 for v in opens), opens
    finally:
        stop.set()
        router.stop()
        a.stop()
        b.stop()
        os.unlink(path)


# ---- 4. an anonymous client naming a tenant; 5. embeddings' budget ---------

@pytest.fixture(scope="module")
def gated():
    """An instance that trusts the router's key; a router with tenants: vip
    (priority 10), a trusted gateway, a 300 tokens/minute tenant, anonymous
    allowed."""
    need_stories()
    inst_cfg = config({"tenants": [{"name": "router", "api_keys": [ROUTER_KEY], "trusted": True},
                                   {"name": "vip", "api_keys": [VIP], "priority": 10}]})
    rt_cfg = config({"allow_anonymous": True, "tenants": [
        {"name": "vip", "api_keys": [VIP], "priority": 10},
        {"name": "gateway", "api_keys": [GATEWAY], "trusted": True},
        {"name": "small", "api_keys": ["sk-sec-small-001"], "tokens_per_minute": 300}]})
    inst = Server("--config", inst_cfg, model=STORIES, threads=1)
    router = Router([inst], "--config", rt_cfg, "--upstream-key", ROUTER_KEY, model=STORIES)
    router.wait_ready(n_up=1)
    yield inst, router
    router.stop()
    inst.stop()
    os.unlink(inst_cfg)
    os.unlink(rt_cfg)


def vip_tokens(inst, tenant):
    try:
        return inst.metric("weft_tenant_prefill_tokens_total", {"tenant": tenant})
    except KeyError:
        return 0


def test_an_anonymous_client_cannot_name_a_tenant(gated):
    inst, router = gated
    v0, d0 = vip_tokens(inst, "vip"), vip_tokens(inst, "router")
    _, text = router.get("/metrics")
    dropped0 = float((re.findall(r'^weft_router_identity_headers_dropped_total (\S+)$', text, re.M) or ["-1"])[0])
    for i, hdr in enumerate(({"x-gateway-inference-fairness-id": "vip"}, {"x-weft-tenant": "vip"})):
        st, _, out = call(router.port, "POST", "/v1/completions",
                          {"prompt": f"Once upon a time {i} dogs", "max_tokens": 2}, headers=hdr)
        assert st == 200, out
    assert vip_tokens(inst, "vip") == v0     # nothing ran as vip
    assert vip_tokens(inst, "router") > d0   # it ran as the router's own (anonymous) traffic
    assert router.metric("weft_router_identity_headers_dropped_total") == dropped0 + 2
    # an ordinary key naming another tenant: dropped too, runs as itself
    st, _, _ = call(router.port, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2},
                    key="sk-sec-small-001", headers={"x-gateway-inference-fairness-id": "vip"})
    assert st == 200 and vip_tokens(inst, "vip") == v0
    # the vip's own key, and a trusted gateway naming its user, run as vip
    st, _, _ = call(router.port, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2}, key=VIP)
    assert st == 200
    v1 = vip_tokens(inst, "vip")
    assert v1 > v0
    st, _, _ = call(router.port, "POST", "/v1/completions", {"prompt": "Once upon a time, a cat", "max_tokens": 2},
                    key=GATEWAY, headers={"x-gateway-inference-fairness-id": "vip"})
    assert st == 200 and vip_tokens(inst, "vip") > v1
    assert router.metric("weft_router_identity_headers_dropped_total") == dropped0 + 3


def test_embeddings_through_the_router_are_charged(gated):
    """A 300 tokens/minute bucket: a 290-token embedding is taken, the next
    one is refused (429 with Retry-After) as the instance alone refuses it,
    and one bigger than the whole budget can never be admitted."""
    inst, router = gated
    key = "sk-sec-small-001"
    text = " ".join(["word"] * 400)
    st, _, out = call(router.port, "POST", "/v1/embeddings", {"input": [text]}, key=key)
    err = json.loads(out)["error"]
    assert st == 429 and err["param"] == "input" and "never be admitted" in err["message"], out
    st, _, out = call(inst.port, "POST", "/tokenize", {"content": " ".join(["word"] * 200)}, key=ROUTER_KEY)
    n = len(json.loads(out)["tokens"])
    words = int(200 * 280 / n)
    st, h, out = call(router.port, "POST", "/v1/embeddings", {"input": " ".join(["word"] * words)}, key=key)
    assert st == 200, out
    st, h, out = call(router.port, "POST", "/v1/embeddings", {"input": " ".join(["word"] * words)}, key=key)
    assert st == 429 and int(h["retry-after"]) >= 1, out
    st, _, out = call(router.port, "POST", "/v1/embeddings", {"input": {"not": "an input"}}, key=key)
    assert st == 400 and json.loads(out)["error"]["param"] == "input"


# ---- 9. a half-closed client; a half-sent header at SIGTERM ---------------

def test_a_half_closed_client_is_answered_and_a_half_sent_header_does_not_hold_sigterm():
    need_stories()
    srv = Server("--drain-timeout", "600", model=STORIES, threads=1)
    try:
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 3}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        assert data.startswith(b"HTTP/1.1 200") and b'"completion_tokens":3' in data, data[:300]
        # a header left half-sent does not hold the drain (it held it to the read timeout)
        half = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert srv.get("/health")[0] == 200  # a round trip after it: the server has read it
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=60)
        assert rc == 0
        data = half.recv(65536)
        assert data.startswith(b"HTTP/1.1 503") and b"not received whole" in data, data[:300]
        half.close()
    finally:
        srv.stop()


# ---- 3. the KV surfaces: off unless enabled, trusted callers only, MACs ----

class Listener(threading.Thread):
    """A TCP port that counts the connections made to it (and answers none)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.accepted = 0
        self.start()

    def run(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.accepted += 1
            c.close()

    def close(self):
        self.srv.close()


def one_stream(srv, key=None):
    """A prompt computed on srv and its blocks read back (srv must trust key)."""
    prompt = "The ferry leaves at dawn and returns by the evening tide, carrying salt and letters. " * 3
    st, _, out = call(srv.port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 4}, key=key)
    assert st == 200, out
    hashes = chain_as(srv, key)
    st, _, stream = call(srv.port, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes), key=key)
    assert st == 200, stream
    return prompt, hashes, stream


def chain_as(srv, key):
    st, _, idx = call(srv.port, "GET", "/v1/kv/index", key=key)
    assert st == 200, idx
    child = {parent: h for h, parent in json.loads(idx)["blocks"]}
    out, h = [], "0" * 16
    while h in child:
        h = child[h]
        out.append(h)
    return out


def test_without_keys_the_kv_surfaces_are_for_fleet_members_only():
    """An instance without API keys (the default, what deploy/k8s ran on
    0.0.0.0): an anonymous client may not read the prefix index or blocks,
    push a block, or make the instance push anywhere (no connection is
    made); a fleet member (the fleet secret's credential) may; an instance
    without a fleet secret serves none of it."""
    need_stories()
    a = Server(model=STORIES, threads=1)
    b = Server(model=STORIES, threads=1)
    off = Server(model=STORIES, threads=1, kv_secret=None)
    sink = Listener()
    member = fleet_credential(KV_SECRET)
    try:
        prompt, hashes, stream = one_stream(a, member)
        for path in ("/v1/kv/index", "/v1/kv/events", "/v1/kv/blocks?hashes=" + hashes[0]):
            st, _, out = call(a.port, "GET", path)
            assert st == 403 and b"trusted caller" in out, (path, out)
        st, _, out = call(b.port, "POST", "/v1/kv/blocks", stream, ctype="application/x-weft-kv-blocks")
        assert st == 403, out
        assert b.metric("weft_kv_transfer_blocks_total", {"direction": "in"}) == 0
        # an anonymous x-weft-pd-push: refused by name, and nothing goes out
        st, _, out = call(a.port, "POST", "/v1/completions", {"prompt": prompt + " again", "max_tokens": 2},
                          headers={"x-weft-pd-push": f"http://127.0.0.1:{sink.port};id=p1"})
        assert st == 403 and b"x-weft-pd-push" in out, out
        st, _, out = call(a.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                          headers={"x-weft-pd": "id=p2;wait_ms=30000"})
        assert st == 403 and b"x-weft-pd" in out, out
        # the fleet member may
        st, _, out = call(b.port, "POST", "/v1/kv/blocks", stream, key=member, ctype="application/x-weft-kv-blocks")
        assert st == 200 and json.loads(out)["imported"] == len(hashes), out
        # without a fleet secret: off, whoever asks
        for key in (None, member):
            st, _, out = call(off.port, "GET", "/v1/kv/index", key=key)
            assert st == 403 and b"shared KV is off" in out, out
            st, _, out = call(off.port, "POST", "/v1/kv/blocks", stream, key=key, ctype="application/x-weft-kv-blocks")
            assert st in (403, 413), out
        assert sink.accepted == 0
    finally:
        sink.close()
        a.stop()
        b.stop()
        off.stop()


def fleet_credential(secret):
    import hashlib
    import hmac
    return hmac.new(secret.encode(), b"weft fleet member v2", hashlib.sha256).hexdigest()


def test_blocks_without_the_fleet_secrets_mac_are_refused_and_counted():
    """Blocks made under another secret, unsigned, or with their MAC cut
    off are refused whole, counted, and nothing of them is used; the
    previous secret (a rotation) is still taken."""
    need_stories()
    a = Server(model=STORIES, threads=1)
    b = Server(model=STORIES, threads=1)
    rot = Server("--kv-secret-previous", KV_SECRET, model=STORIES, threads=1, kv_secret="weft-test-fleet-secret-0002")
    member = fleet_credential(KV_SECRET)
    try:
        _, hashes, stream = one_stream(a, member)
        forged = [kvb.restream(stream, "another-fleet-secret-000"), kvb.restream(stream, None)]
        for i, bad in enumerate(forged):
            st, _, out = call(b.port, "POST", "/v1/kv/blocks", bad, key=member, ctype="application/x-weft-kv-blocks")
            assert st == 403 and json.loads(out)["error"]["code"] == "kv_blocks_unauthenticated", out
            assert b.metric("weft_kv_rejected_total", {"what": "mac"}) == i + 1
        assert b.metric("weft_kv_transfer_blocks_total", {"direction": "in"}) == 0
        # an instance rotating to a new secret takes the old one's blocks (and members)
        st, _, out = call(rot.port, "POST", "/v1/kv/blocks", stream, key=member, ctype="application/x-weft-kv-blocks")
        assert st == 200 and json.loads(out)["imported"] == len(hashes), out
    finally:
        a.stop()
        b.stop()
        rot.stop()


class Resp:
    """A binary-safe Redis client on a unix socket (GET/SET/KEYS of block values)."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(10)
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    def call(self, *args):
        args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        self.s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        return self._read()

    def _read(self):
        line = self.f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            return [self._read() for _ in range(int(rest))]
        if t == b":":
            return int(rest)
        if t == b"-":
            raise RuntimeError(rest.decode())
        return rest

    def close(self):
        self.f.close()
        self.s.close()


def test_blocks_forged_in_redis_are_refused_and_the_answer_is_unchanged():
    """Whoever can write Redis without the fleet secret: its blocks (other
    payloads under the right keys, unsigned or signed under another secret)
    are refused and counted; the instance recomputes, and answers as the
    instance that computed the prefix."""
    import shutil
    from test_kv_remote import Redis
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    need_stories()
    redis = Redis()
    url = "unix://" + redis.sock
    a = Server("--kv-remote", url, model=STORIES, threads=1, cpu=0)
    b = Server("--kv-remote", url, model=STORIES, threads=1, cpu=1)
    r = Resp(redis.sock)
    try:
        text = "Lily and her dog walked to the old mill by the river every morning before school. " * 3
        ref = call(a.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 8, "temperature": 0,
                                                       "ignore_eos": True})
        ref = json.loads(ref[2])
        n = ref["usage"]["prompt_tokens"]
        deadline = time.time() + 60
        while time.time() < deadline and a.metric("weft_kv_remote_written_blocks_total") < n // 16:
            time.sleep(0.05)
        keys = sorted(r.call("KEYS", "weft:kv:*"))
        assert len(keys) >= 3, keys
        for i, k in enumerate(keys):
            v = r.call("GET", k)
            h = kvb.header(v)
            assert h["version"] == 5 and h["flags"] & 1  # written under the fleet secret
            meta, payload = kvb.blocks(v)[0]
            bad = bytes(reversed(payload))  # another payload under the same name
            h2 = dict(h, flags=0 if i % 2 else 1)
            forged = kvb.write_header(h2) + kvb.write_block(h2, meta, bad, None if i % 2 else "not-the-fleet-secret")
            assert r.call("SET", k, forged) == b"OK"
        got = call(b.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 8, "temperature": 0,
                                                       "ignore_eos": True})
        got = json.loads(got[2])
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert b.metric("weft_kv_rejected_total", {"what": "mac"}) >= 1
        assert b.metric("weft_kv_remote_rejected_total") >= 1
        assert b.metric("weft_kv_imported_hit_tokens_total") == 0
    finally:
        r.close()
        a.stop()
        b.stop()
        redis.stop()


def test_kv_pushes_are_bounded_in_total_and_pins_per_hand_off():
    """Push bodies held at once are bounded over every connection (a third
    3-MB push waits for none: 503 before its body is read), and the blocks
    one hand-off pins are what one prompt can use: the rest stay cached,
    unpinned, counted."""
    need_stories()
    member = fleet_credential(KV_SECRET)
    a = Server(model=STORIES, threads=1)
    b = Server("--max-kv-push-mib", "4", "--max-kv-push-total-mib", "8", "-c", "128", model=STORIES, threads=1)
    conns = []
    try:
        head = (b"POST /v1/kv/blocks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + member.encode() +
                b"\r\nContent-Type: application/x-weft-kv-blocks\r\nContent-Length: 3000000\r\n\r\n")
        for i in range(2):
            c = socket.create_connection(("127.0.0.1", b.port), timeout=30)
            c.sendall(head + b"x" * 1000)  # held: the rest of the body never comes
            conns.append(c)
        assert wait_metric(b, "weft_kv_push_held_bytes", lambda v: v >= 6000000)
        c = socket.create_connection(("127.0.0.1", b.port), timeout=30)
        c.sendall(head)
        data = c.recv(65536)
        c.close()
        assert data.startswith(b"HTTP/1.1 503") and b"held here already" in data, data[:300]
        assert b.metric("weft_kv_push_refused_total") == 1
        for c in conns:
            c.close()
        assert wait_metric(b, "weft_kv_push_held_bytes", lambda v: v == 0)
        # one hand-off's pins: at most a 128-token prompt's blocks (9)
        text = " ".join(f"Step {i}: the lighthouse keeper counted the stairs again." for i in range(40))
        st, _, out = call(a.port, "POST", "/v1/completions", {"prompt": text, "max_tokens": 1}, key=member)
        assert st == 200, out
        hashes = chain_as(a, member)
        st, _, stream = call(a.port, "GET", "/v1/kv/blocks?hashes=" + ",".join(hashes[:14]), key=member)
        assert st == 200 and len(hashes) >= 14
        st, _, out = call(b.port, "POST", "/v1/kv/blocks", stream, key=member, ctype="application/x-weft-kv-blocks",
                          headers={"x-weft-pd-id": "handoff-1"})
        assert st == 200 and json.loads(out)["imported"] == 14, out
        assert b.metric("weft_pd_pins_refused_total") == 14 - 9
    finally:
        for c in conns:
            c.close()
        a.stop()
        b.stop()


# ---- 7. schemas too big to compile quickly -------------------------------

def wide_schema(n):
    """n optional integer properties: 30,000 of them fit in about 850 KB, under the body limit."""
    return {"type": "json_schema", "json_schema": {"name": "wide", "schema": {
        "type": "object", "properties": {f"f{i}": {"type": "integer"} for i in range(n)}}}}


def test_huge_schemas_are_refused_by_name_off_the_tokenizing_path():
    """Two schemas of 30,000 properties (about 860 KB each, under the body
    limit) are refused with a 400 naming the grammar's bound; they compile on
    the grammar thread, and a plain request completes beside them. Before,
    each took seconds of quadratic compiling on a tokenizing worker, and the
    two held intake for everyone."""
    need_stories()
    srv = Server(model=STORIES, threads=1)
    try:
        big = {"prompt": "x", "max_tokens": 4, "response_format": wide_schema(30000)}
        assert 800_000 < len(json.dumps(big)) < 1 << 20
        out = [None, None]

        def go(i):
            out[i] = call(srv.port, "POST", "/v1/completions", big)

        ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        st, _, plain = call(srv.port, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 2})
        assert st == 200, plain
        for t in ts:
            t.join(120)
        for st, _, body in out:
            err = json.loads(body)["error"]
            assert st == 400 and err["param"] == "response_format" and "65536 grammar rules" in err["message"], body
        assert srv.metric("weft_grammar_compiles_total") == 2
        # a schema of 1,000 properties is served
        st, _, body = call(srv.port, "POST", "/v1/completions",
                           {"prompt": "x", "max_tokens": 2, "response_format": wide_schema(1000)})
        assert st == 200, body
    finally:
        srv.stop()
