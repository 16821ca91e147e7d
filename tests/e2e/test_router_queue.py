"""The router's queue when the fleet is saturated (a real instance with two
sequence slots): requests wait at the router and are bound to the instance as
room frees, fairly between tenants of one priority; a higher priority does
not wait behind them (the instance preempts the lower one); past a tenant's
share the request is shed with 503 and Retry-After; /health keeps answering."""
import http.client
import json
import os
import tempfile
import threading
import time

import pytest

from conftest import Router, Server

KEYS = {"a": "sk-queue-a-000000", "b": "sk-queue-b-000000", "hi": "sk-queue-hi-00000"}


class Stream(threading.Thread):
    def __init__(self, port, key, i, n=24):
        super().__init__(daemon=True)
        self.port, self.key, self.i, self.n = port, key, i, n
        self.status, self.t_head, self.t_first, self.done, self.headers = None, None, None, False, {}

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        body = {"prompt": f"Item {self.i}: a short list of fruit", "max_tokens": self.n, "temperature": 0,
                "ignore_eos": True, "stream": True}
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Content-Type": "application/json", "Authorization": "Bearer " + self.key})
        r = c.getresponse()
        self.status, self.t_head = r.status, time.monotonic()
        self.headers = {k.lower(): v for k, v in r.getheaders()}
        buf = b""
        while True:
            d = r.read1(65536)
            if not d:
                break
            buf += d
            if self.t_first is None and b"data: {" in buf:
                self.t_first = time.monotonic()  # the first token's chunk
            if b"data: [DONE]" in buf:
                self.done = True
        c.close()


@pytest.fixture(scope="module")
def setup():
    cfg = {"tenants": [{"name": "a", "api_keys": [KEYS["a"]], "priority": 0},
                       {"name": "b", "api_keys": [KEYS["b"]], "priority": 0},
                       {"name": "hi", "api_keys": [KEYS["hi"]], "priority": 10},
                       # the instance trusts the router's key: it takes each request's priority from it
                       {"name": "router", "api_keys": ["sk-queue-router-0"], "trusted": True, "priority": 10}]}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    inst = Server("--max-seqs", "2", "--config", path, threads=1)
    router = Router([inst], "--config", path, "--saturate-waiting", "1", "--queue-per-tenant", "4")
    router.wait_ready(n_up=1)
    yield router
    router.stop()
    inst.stop()
    os.unlink(path)


def wait_for(fn, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(0.01)
    raise AssertionError(what)


def depth(router, tenant):
    try:
        return router.metric("weft_router_queue_tenant_depth", {"tenant": tenant})
    except KeyError:
        return 0


def test_saturated_fleet_queues_fairly_sheds_past_the_share_and_lets_priority_through(setup):
    r = setup
    # two running, one waiting: saturated (long enough to outlast the set-up)
    fill = [Stream(r.port, KEYS["a"], i, n=160) for i in range(3)]
    for s in fill:
        s.start()
    wait_for(lambda: all(s.status for s in fill), "the first three were not dispatched")
    qa = [Stream(r.port, KEYS["a"], 10 + i) for i in range(5)]  # four queue, the fifth is past a's share
    for k, s in enumerate(qa):
        s.start()  # one at a time, in this order: each is queued (or shed) before the next is sent
        wait_for(lambda: depth(r, "a") + sum(1 for x in qa if x.status == 503) == k + 1, "a's queue")
    wait_for(lambda: depth(r, "a") == 4 and sum(1 for s in qa if s.status == 503) == 1, "a's queue")
    shed = [s for s in qa if s.status == 503]
    assert int(shed[0].headers["retry-after"]) >= 1
    qb = [Stream(r.port, KEYS["b"], 20 + i) for i in range(2)]
    for k, s in enumerate(qb):
        s.start()
        wait_for(lambda: depth(r, "b") == k + 1, "b's queue")
    st, _ = r.get("/health")
    assert st == 200
    hi = Stream(r.port, KEYS["hi"], 30)
    hi.start()
    for s in fill + qa + qb + [hi]:
        s.join(300)
    queued_a = [s for s in qa if s.status == 200]
    assert len(queued_a) == 4 and all(s.status == 200 and s.done for s in fill + qb + [hi])
    # fair within the level: b's two leave the queue before a's third and fourth
    heads_a = sorted(s.t_head for s in queued_a)
    assert max(s.t_head for s in qb) < heads_a[2], (heads_a, [s.t_head for s in qb])
    # the higher priority did not wait behind the queue
    assert hi.t_first < min(s.t_first for s in queued_a + qb)
    assert r.metric("weft_router_queued_total") == 6  # the higher priority went straight to the instance
    assert r.metric("weft_router_shed_total", {"reason": "tenant_full"}) == 1
    assert r.metric("weft_router_queue_tenant_depth", {"tenant": "a"}) == 0
