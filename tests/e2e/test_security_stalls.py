"""weft against what stalls or lies (the security issue, items 6 and 8): a
Redis that trickles its replies, an instance whose answers are not what
they claim, a stream that stops while its instance still answers /load, an
engine that stops stepping. Each case here failed before its fix.
Assertions are on structure (what completed while what was still held,
counters, statuses, token-for-token equality); waits are bounded polls."""
import http.client
import json
import os
import socket
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ROOT, SANITIZED, Router, Server
from test_failover import Stream

STORIES = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
PLAIN = os.path.join(ROOT, "tests", "data", "plain-chat.jinja")  # stories260K has no chat template


def need_stories():
    if not os.path.exists(STORIES):
        pytest.skip("stories260K.gguf is not in ../shared/models")


def post(port, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def until(pred, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


# ---- 6. a Redis that trickles --------------------------------------------

class TrickleRedis(threading.Thread):
    """Accepts Redis connections; answers an MGET with the start of a reply
    and then one byte every 50 ms (each read returns within any per-read
    timeout, the reply never ends); answers nothing else."""

    def __init__(self):
        super().__init__(daemon=True)
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.trickling = 0
        self.mgets = 0
        self.replies_finished = 0  # never: each reply trickles until its reader leaves
        self.stop = threading.Event()
        self.conns = []
        self.start()

    def run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        try:
            while not self.stop.is_set():
                d = c.recv(65536)
                if not d:
                    return
                buf += d
                if b"MGET" in buf:
                    self.mgets += 1
                    self.trickling += 1
                    c.sendall(b"*1\r\n$1000000\r\n")
                    while not self.stop.is_set():
                        c.sendall(b"x")
                        time.sleep(0.05)
                    return
        except OSError:
            return
        finally:
            if b"MGET" in buf:
                self.trickling -= 1

    def close(self):
        self.stop.set()
        self.srv.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def test_a_short_request_completes_while_a_redis_trickles():
    """Two prompts with cached-looking prefixes start fetches that a Redis
    trickling its reply holds forever; they go on at their deadline
    (recomputing), an unrelated short request completes meanwhile, and the
    stalled tier shows in /health and the metrics. Before, the fetches held
    both tokenize workers and the short request waited behind them."""
    need_stories()
    stub = TrickleRedis()
    srv = Server("--kv-remote", f"redis://127.0.0.1:{stub.port}", model=STORIES, threads=1)
    try:
        long_prompt = "Lily and her dog walked along the river to the old mill every morning before school. " * 4
        results = [None, None]

        def go(i):
            results[i] = post(srv.port, "/v1/completions", {"prompt": f"{i} " + long_prompt, "max_tokens": 4})

        ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        assert until(lambda: stub.mgets >= 1), "no fetch reached the stub"
        st, out = post(srv.port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert st == 200, out
        for t in ts:
            t.join(120)
        # every request completed, and the stub never finished a reply: nothing waited for one
        assert [r[0] for r in results] == [200, 200], results
        assert stub.mgets >= 1 and stub.replies_finished == 0
        st, health = srv.get("/health")
        assert st == 200 and json.loads(health)["kv_remote"] == "stalled", health
        assert srv.metric("weft_kv_remote_stalled") == 1
        # both long requests went on without what they asked for (by their deadline: the reads were cut)
        ended = sum(srv.metric("weft_kv_remote_fetches_total", {"result": k}) for k in ("in_time", "late", "dropped"))
        assert ended >= 1 and srv.metric("weft_kv_remote_hit_blocks_total") == 0
        # the drain does not wait on the held read (it is cut): stop() asserts exit 0
        srv.stop()
    finally:
        stub.close()
        srv.stop()


# ---- 8. an instance that lies; a stream that stops; an engine that stops ---

class LyingInstance(ThreadingHTTPServer):
    """A fake instance: /load is a real instance's (so the router takes it);
    generation answers are a 200 that is not what it says: `garbage` (JSON
    that does not parse) or `endless` (an SSE event with no end)."""

    def __init__(self, real, mode):
        self.real, self.mode, self.answered = real, mode, 0
        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/load":
            with urllib.request.urlopen(self.server.real.base + "/load", timeout=10) as r:
                body = r.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        self.server.answered += 1
        if self.server.mode == "garbage":
            body = b'{"id":"cmpl-1","choices":[{"text":"I am not JSON'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(b'data: {"choices":[{"text":"')
            for _ in range(64):  # 4 MiB of one event that never ends
                self.wfile.write(b"a" * 65536)
        except OSError:
            pass
        self.close_connection = True


@pytest.mark.parametrize("mode", ["garbage", "endless"])
def test_an_instance_answering_garbage_is_not_forwarded(mode):
    """Round-robin over a real instance and a lying one: every client gets
    a valid answer (the lie is never forwarded, the request moves), and the
    lies count against the liar."""
    need_stories()
    real = Server("--chat-template", PLAIN, model=STORIES, threads=1)
    liar = LyingInstance(real, mode)
    router = Router([real, liar.base], "--policy", "round-robin", "--no-kv-events", "--chat-template", PLAIN,
                    model=STORIES)
    try:
        router.wait_ready(n_up=2)
        for i in range(4):
            body = {"messages": [{"role": "user", "content": f"Once upon a time {i}"}], "max_tokens": 4,
                    "temperature": 0}
            if mode == "endless":
                s = Stream(router.port, dict(body, stream=True))
                s.run()
                assert s.status == 200 and s.done and not s.error and s.text, (s.status, s.error)
            else:
                st, out = post(router.port, "/v1/chat/completions", body)
                assert st == 200 and json.loads(out)["choices"][0]["message"]["content"], out
        assert liar.answered >= 1
        assert router.metric("weft_router_invalid_answers_total") == liar.answered
        reason = "invalid"
        kind = "weft_router_retries_total" if mode == "garbage" else "weft_router_migrations_total"
        assert router.metric(kind, {"reason": reason}) == liar.answered
    finally:
        router.stop()
        real.stop()
        liar.shutdown()


def test_a_stream_that_stalls_moves_and_an_engine_that_stops_is_unhealthy():
    """An instance's engine held still mid-stream (--test-hooks) while the
    instance still answers /load: the router sees the stream stall and
    moves it; the client's text equals an unbroken stream's, token for
    token. The held engine's watchdog then says so (/health 503) until it
    steps again."""
    n_tok = 32 if SANITIZED else 96
    a = Server("--test-hooks", "--watchdog-ms", "60000", threads=1, cpu=0)
    b = Server("--test-hooks", threads=1, cpu=1)
    router = Router([a, b], "--stall-ms", "1500")
    body = {"messages": [{"role": "user", "content": "Tell me about lighthouses."}], "max_tokens": n_tok,
            "ignore_eos": True, "stream": True, "temperature": 0}
    try:
        router.wait_ready(n_up=2)
        ref = Stream(a.port, body)
        ref.run()
        assert ref.done and not ref.error
        s = Stream(router.port, body)
        s.start()
        assert s.head.wait(60) and s.instance
        held = a if s.instance == f"{a.host}:{a.port}" else b
        assert until(lambda: len(s.pieces) >= 2), "no tokens came"
        st, _ = post(held.port, "/test/engine-pause", {"paused": True})
        assert st == 200
        s.join(300)
        assert s.status == 200 and s.done and not s.error, (s.status, s.error)
        assert s.text == ref.text
        assert router.metric("weft_router_migrations_total", {"reason": "stall"}) == 1
        # the held engine's own watchdog (60 s here) had not fired: the router moved the stream on
        # its own evidence, while the instance still answered /load
        assert held.get("/load")[0] == 200
    finally:
        for x in (a, b):  # a held engine never ends what it holds: it would hold the drain
            post(x.port, "/test/engine-pause", {"paused": False})
        router.stop()
        a.stop()
        b.stop()
    c = Server("--test-hooks", "--watchdog-ms", "300", model=STORIES if os.path.exists(STORIES) else None, threads=1)
    try:
        assert post(c.port, "/test/engine-pause", {"paused": True})[0] == 200
        done = {}
        t = threading.Thread(target=lambda: done.update(r=post(c.port, "/v1/completions",
                                                               {"prompt": "Once upon a time", "max_tokens": 3})))
        t.start()
        assert until(lambda: c.get("/health")[0] == 503), "the watchdog did not fire"
        st, h = c.get("/health")
        assert json.loads(h)["status"] == "stalled"
        assert c.get("/load")[0] == 503
        assert post(c.port, "/test/engine-pause", {"paused": False})[0] == 200
        t.join(60)
        assert done["r"][0] == 200
        assert until(lambda: c.get("/health")[0] == 200)
    finally:
        post(c.port, "/test/engine-pause", {"paused": False})
        c.stop()
