"""weft serve --mock, the router's test bed at scale: its speed model shows in
/load and in how long answers take to produce (as counted by the engine's
own rates, not by a clock here), its KV blocks and events are real, its
injected failures come in the asked kinds and proportions, reproducibly,
and eight of them run behind one router on this machine."""
import http.client
import json
import socket
import struct
import time

from conftest import Router, Server, metric_in


def post(port, path, body, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def test_mock_speed_model_blocks_and_events():
    m = Server("--mock", "prefill=5000,decode=200,vendor=amd,device=MI300X", calibrate=True)
    try:
        status, body = m.get("/load")
        load = json.loads(body)
        assert load["devices"][0] == {"id": "mock:0", "name": "MI300X", "backend": "mock", "vendor": "amd",
                                      "memory_bytes": 0}
        # the calibration ran on the speed model: the measured rates are the model's
        assert abs(load["prefill_tokens_per_s"] / 5000 - 1) < 0.1, load
        assert abs(load["decode_tokens_per_s"] / 200 - 1) < 0.3, load
        assert load["kv"]["device"]["total"] > 1000  # the real model's capacity at --kv-mib
        prompt = "Once upon a time there was a little girl who lived in a village near the forest " * 3
        s1, _, d1 = post(m.port, "/v1/completions", {"prompt": prompt, "max_tokens": 5})
        s2, _, d2 = post(m.port, "/v1/completions", {"prompt": prompt, "max_tokens": 5})
        assert s1 == s2 == 200
        u1, u2 = json.loads(d1)["usage"], json.loads(d2)["usage"]
        assert u1["completion_tokens"] == 5 and u1["prompt_tokens_details"]["cached_tokens"] == 0
        assert u2["prompt_tokens_details"]["cached_tokens"] == (u1["prompt_tokens"] - 1) // 16 * 16  # real prefix cache
        # same prompt, same (deterministic) tokens
        assert json.loads(d1)["choices"][0]["text"] == json.loads(d2)["choices"][0]["text"]
        status, body = m.get("/v1/kv/index")
        assert json.loads(body)["count"] >= u1["prompt_tokens"] // 16
    finally:
        m.stop()


def failure_kinds(seed):
    m = Server("--mock", "prefill=100000,decode=10000", "--mock-fail", "429=0.1,503=0.1,500=0.1,nokv=0.1",
               "--mock-seed", str(seed))
    try:
        seen = []
        for i in range(200):
            status, hdrs, data = post(m.port, "/v1/completions", {"prompt": "hello %d" % i, "max_tokens": 1})
            msg = json.loads(data).get("error", {}).get("message", "")
            seen.append("nokv" if "KV" in msg else str(status))
        return seen
    finally:
        m.stop()


def test_mock_injected_failures_in_proportion_and_reproducible():
    a = failure_kinds(7)
    counts = {k: a.count(k) for k in ("200", "429", "503", "500", "nokv")}
    assert sum(counts.values()) == 200, counts
    assert 80 <= counts["200"] <= 160, counts   # 60 % expected
    for k in ("429", "503", "500", "nokv"):
        assert 5 <= counts[k] <= 40, counts      # 10 % each expected
    assert failure_kinds(7) == a                 # the same seed, the same sequence
    assert failure_kinds(8) != a


def test_mock_hang_answers_nothing_until_the_client_leaves():
    m = Server("--mock", "prefill=100000,decode=10000", "--mock-fail", "hang=1")
    try:
        s = socket.create_connection(("127.0.0.1", m.port), timeout=30)
        body = b'{"prompt":"x","max_tokens":1}'
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        while m.metric("weft_mock_injected_failures_total", {"kind": "hang"}) < 1:
            pass  # until the server has taken the request and chosen to hang
        # it was chosen and nothing was sent: no byte is waiting on the socket
        s.setblocking(False)
        try:
            got = s.recv(100)
        except BlockingIOError:
            got = None
        assert got is None
        gone = m.metric("weft_client_disconnects_total")
        # the client leaves with a reset (a FIN alone is a half-close, which is answered)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        deadline = time.time() + 60
        while m.metric("weft_client_disconnects_total") == gone and time.time() < deadline:
            pass  # the server sees the client leave and lets the request go
        assert m.metric("weft_client_disconnects_total") == gone + 1
        assert m.get("/health")[0] == 200
    finally:
        m.stop()  # the drain cuts nothing left hanging: exit 0


def test_eight_mocks_behind_one_router():
    mocks = [Server("--mock", "prefill=%d,decode=100,vendor=v%d" % (2000 * (1 + i % 4), i), threads=1)
             for i in range(8)]
    r = Router(mocks)
    try:
        r.wait_ready(n_up=8)
        for i in range(64):
            status, hdrs, _ = post(r.port, "/v1/completions",
                                   {"prompt": "group %d " % (i % 16) + "shared words here " * 8, "max_tokens": 2})
            assert status == 200
        _, m = r.get("/metrics")
        assert metric_in(m, "weft_router_instances") == 8
        assert sum(metric_in(m, "weft_router_requests_total", {"instance": "127.0.0.1:%d" % x.port})
                   for x in mocks) == 64
    finally:
        r.stop()
        for x in mocks:
            x.stop()
