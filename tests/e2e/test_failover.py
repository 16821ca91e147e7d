"""Failover through `weft router` on three real instances: an instance
killed (-9) or hung (SIGSTOP) under streaming load loses no request; the
streams it held move to another instance mid-way (weft.continue) and equal,
token for token, what a single instance answers (greedy and seeded); the hung
instance gets traffic again once it answers its health check; an instance
whose KV cache is full refuses, the router retries elsewhere (no client 5xx)
and counts the scale-out signal."""
import http.client
import json
import os
import re
import signal
import threading
import time

import pytest

from conftest import SANITIZED, Router, Server

N_TOK = 24 if SANITIZED else 48


def prompts(n, tag):
    topics = ["rivers", "volcanoes", "bridges", "owls", "glaciers", "clocks", "tea", "comets", "maps", "bees",
              "ships", "deserts", "violins", "salt", "forests", "kites"]
    return [f"Write a few sentences about {topics[i % len(topics)]} ({tag} {i})." for i in range(n)]


def body_for(p, i):
    b = {"messages": [{"role": "user", "content": p}], "max_tokens": N_TOK, "ignore_eos": True, "stream": True,
         "stream_options": {"include_usage": True}}
    if i % 3 == 2:
        b.update(temperature=0.8, seed=1000 + i)  # seeded sampling
    else:
        b.update(temperature=0)
    return b


class Stream(threading.Thread):
    """One streamed chat request; records head, content pieces, usage, [DONE]."""

    def __init__(self, port, body):
        super().__init__(daemon=True)
        self.port, self.body = port, body
        self.instance, self.pieces, self.usage, self.done, self.error, self.status = None, [], [], False, None, None
        self.roles = 0
        self.head = threading.Event()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            c.request("POST", "/v1/chat/completions", json.dumps(self.body), {"Content-Type": "application/json"})
            r = c.getresponse()
            self.status = r.status
            self.instance = r.getheader("x-weft-instance")
            self.head.set()
            buf = b""
            while True:
                d = r.read1(65536) if hasattr(r, "read1") else r.read(1)
                if not d:
                    break
                buf += d
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    line = ev.decode()
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        self.done = True
                        continue
                    j = json.loads(line[6:])
                    if "error" in j:
                        self.error = j["error"]
                        continue
                    assert "weft" not in j, "the router's extension reached the client"
                    if j.get("usage"):
                        self.usage.append(j["usage"])
                    for ch in j["choices"]:
                        if ch["delta"].get("role"):
                            self.roles += 1
                        if ch["delta"].get("content"):
                            self.pieces.append(ch["delta"]["content"])
            c.close()
        except Exception as e:  # noqa: BLE001 - recorded and asserted on
            self.error = repr(e)
        finally:
            self.head.set()

    @property
    def text(self):
        return "".join(self.pieces)


def references(srv, bodies):
    """The oracle: one instance, all at once (its outputs do not depend on batching)."""
    ss = [Stream(srv.port, b) for b in bodies]
    for s in ss:
        s.start()
    for s in ss:
        s.join(300)
        assert s.status == 200 and s.done and not s.error, (s.status, s.error)
    return [s.text for s in ss]


@pytest.fixture()
def fleet():
    # three real instances, one thread each, two cores between them
    insts = [Server("--max-conns-per-client", "1024", threads=1, cpu=i % 2) for i in range(3)]
    yield insts
    for s in insts:
        if s.proc.poll() is None:
            try:
                os.kill(s.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            s.stop()


def run_failure(fleet, how, tag):
    """Streams through a router; once the instance holding the most has sent
    each of them a few tokens, `how` it. Returns (router, victim, streams, refs)."""
    ps = prompts(12, tag)
    bodies = [body_for(p, i) for i, p in enumerate(ps)]
    live = [s for s in fleet if s.proc.poll() is None]
    refs = references(live[0], bodies)
    router = Router(live, "--poll-ms", "100")
    router.wait_ready(n_up=len(live))
    streams = [Stream(router.port, b) for b in bodies]
    for s in streams:
        s.start()
    for s in streams:
        assert s.head.wait(120)
    by = {}
    for s in streams:
        by.setdefault(s.instance, []).append(s)
    victim_name = max(by, key=lambda k: len(by[k]))
    victim = next(s for s in live if victim_name.endswith(":%d" % s.port))
    held = by[victim_name]
    assert len(held) >= 3, {k: len(v) for k, v in by.items()}
    deadline = time.time() + 120
    while time.time() < deadline and not all(len(s.pieces) >= 3 or not s.is_alive() for s in held):
        time.sleep(0.01)
    moved_at = [len(s.pieces) for s in held]
    if how == "kill":
        victim.proc.kill()
        victim.proc.wait()
    else:
        os.kill(victim.proc.pid, signal.SIGSTOP)
    for s in streams:
        s.join(300)
        assert not s.is_alive()
    return router, victim, streams, refs, held, moved_at


def check_streams(streams, refs, held, moved_at):
    for s, ref in zip(streams, refs):
        assert s.status == 200 and not s.error, (s.instance, s.error)
        assert s.done and len(s.usage) == 1 and s.usage[0]["completion_tokens"] == N_TOK, (s.usage, s.done)
        assert s.roles == 1
        assert s.text == ref, (s.instance, s.text, ref)
    # the held streams were cut mid-way, not at their ends
    assert sum(1 for k, s in zip(moved_at, held) if k < N_TOK - 2) >= 3, moved_at


def test_kill_9_under_streaming_load_moves_streams_exactly(fleet):
    router, victim, streams, refs, held, moved_at = run_failure(fleet, "kill", "kill")
    try:
        check_streams(streams, refs, held, moved_at)
        _, m = router.get("/metrics")
        moved = sum(float(v) for v in re.findall(r'^weft_router_migrations_total\{[^}]*\} (\S+)$', m, re.M))
        assert moved >= 3, m
        assert router.metric("weft_router_circuit_state", {"instance": f"127.0.0.1:{victim.port}"}) == 2
        # nothing else fails while it is down
        s = Stream(router.port, body_for("One more, after the failure.", 0))
        s.run()
        assert s.status == 200 and s.done and s.instance != f"127.0.0.1:{victim.port}"
    finally:
        router.stop()


def test_sigstop_hang_moves_streams_and_the_instance_comes_back(fleet):
    router, victim, streams, refs, held, moved_at = run_failure(fleet, "stop", "stop")
    try:
        check_streams(streams, refs, held, moved_at)
        assert router.metric("weft_router_migrations_total", {"reason": "hang"}) >= 3
        name = f"127.0.0.1:{victim.port}"
        assert router.metric("weft_router_circuit_state", {"instance": name}) == 2
        os.kill(victim.proc.pid, signal.SIGCONT)
        # once its health check passes again (the next /load poll), it is tried again
        deadline = time.time() + 30
        while time.time() < deadline and router.metric("weft_router_circuit_state", {"instance": name}) == 2:
            time.sleep(0.02)
        assert router.metric("weft_router_circuit_state", {"instance": name}) < 2
        # a burst spreads over the fleet again (one trial request first, while half-open)
        burst = [Stream(router.port, body_for(p, 0)) for p in prompts(9, "back")]
        for s in burst:
            s.start()
        for s in burst:
            s.join(300)
            assert s.status == 200 and s.done and not s.error
        seen = {s.instance for s in burst}
        assert name in seen, seen
        assert router.metric("weft_router_circuit_state", {"instance": name}) == 0
    finally:
        router.stop()


def test_kv_exhaustion_on_one_instance_is_retried_elsewhere_and_signalled(fleet):
    live = [s for s in fleet if s.proc.poll() is None]
    # KV for one context (256 tokens: two or three of these answers at once), one request waiting at
    # most: the rest is refused as no KV room
    tiny = Server("-c", "256", "--kv-mib", "1", "--max-waiting", "1", threads=1, cpu=0)
    router = Router([tiny, *live[:2]], "--poll-ms", "100", "--policy", "round-robin")
    try:
        router.wait_ready(n_up=3)
        before_5xx = router.metric("weft_router_http_requests_total", {"code": "5xx"})  # /ready's 503s
        streams = [Stream(router.port, dict(body_for(p, 0), max_tokens=100))
                   for p in prompts(12, "kv")]
        for s in streams:
            s.start()
        for s in streams:
            s.join(300)
        for s in streams:
            assert s.status == 200 and s.done and not s.error, (s.status, s.error)
        name = f"127.0.0.1:{tiny.port}"
        assert router.metric("weft_router_retries_total", {"reason": "no_kv_room"}) >= 1
        _, m = router.get("/metrics")
        sig = sum(float(v) for v in
                  re.findall(r'^weft_router_scale_out_signals_total\{reason="no_kv_room",[^}]*\} (\S+)$', m, re.M))
        assert sig >= 1, m
        assert re.search(r'^weft_router_desired_extra_instances\{device_class="[^"]*"\} [1-9]', m, re.M), m
        assert tiny.metric("weft_rejected_no_kv_room_total") == 0  # not "never fits": the queue was full
        assert router.metric("weft_router_circuit_state", {"instance": name}) == 0  # refusals are not failures
        assert router.metric("weft_router_http_requests_total", {"code": "5xx"}) == before_5xx
    finally:
        router.stop()
        tiny.stop()
