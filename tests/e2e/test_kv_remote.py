"""The remote KV tier on a real redis-server (started here, on a unix
socket and a loopback port): a prefix instance A computed is served on
instance B from Redis without recomputing it (counted) and with A's answer;
Redis killed or flushed mid-run fails no request (recompute, counted); a
throttled link (a slow proxy in front of Redis) makes the instance choose
recomputing (counted)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import Server

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/install-deps.sh)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Redis:
    def __init__(self):
        self.dir = tempfile.mkdtemp()
        self.sock = os.path.join(self.dir, "redis.sock")
        self.port = free_port()
        self.proc = subprocess.Popen([REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--unixsocket",
                                      self.sock, "--save", "", "--appendonly", "no", "--dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.call("PING") == b"+PONG":
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def call(self, *args):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.sock)
        s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args))
        out = s.recv(65536).split(b"\r\n")[0]
        s.close()
        return out

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class SlowProxy(threading.Thread):
    """TCP proxy to Redis passing at most `bps` bytes per second each way."""

    def __init__(self, target_port, bps):
        super().__init__(daemon=True)
        self.target, self.bps = target_port, bps
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.port = self.srv.getsockname()[1]

    def pump(self, a, b):
        try:
            while True:
                d = a.recv(16384)
                if not d:
                    break
                b.sendall(d)
                time.sleep(len(d) / self.bps)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def run(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self.pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self.pump, args=(u, c), daemon=True).start()


def prompt(tag, n_lines=14):
    return " ".join(f"{tag} line {i}: the ferry leaves at dawn and returns by the evening tide." for i in range(n_lines))


def complete(srv, text, max_tokens=8):
    import urllib.request
    req = urllib.request.Request(srv.base + "/v1/completions", data=json.dumps(
        {"prompt": text, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def wait_metric(srv, name, pred, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred(srv.metric(name)):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture()
def redis():
    r = Redis()
    yield r
    r.stop()


def test_a_prefix_computed_on_one_instance_is_served_on_another_from_redis(redis):
    url = "unix://" + redis.sock
    a = Server("--kv-remote", url, threads=1, cpu=0)
    b = Server("--kv-remote", url, threads=1, cpu=1)
    try:
        text = prompt("shared")
        ref = complete(a, text)
        n = ref["usage"]["prompt_tokens"]
        usable = (n - 1) // 16
        assert wait_metric(a, "weft_kv_remote_written_blocks_total", lambda v: v >= n // 16), "write-behind"
        pf0 = b.metric("weft_prefill_tokens_total")
        got = complete(b, text)
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert b.metric("weft_kv_remote_hit_blocks_total") == usable
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == usable * 16
        assert b.metric("weft_prefill_tokens_total") - pf0 == n - usable * 16  # the rest only
        assert b.metric("weft_kv_remote_decisions_total", {"choice": "fetch"}) == 1
        # values are self-describing and keyed by the model's fingerprint
        assert redis.call("DBSIZE").startswith(b":")
    finally:
        a.stop()
        b.stop()


def test_redis_killed_or_flushed_mid_run_fails_no_request(redis):
    url = "unix://" + redis.sock
    a = Server("--kv-remote", url, threads=1, cpu=0)
    b = Server("--kv-remote", url, threads=1, cpu=1)
    try:
        refs = {t: complete(a, prompt(t, 6))["choices"][0]["text"] for t in ("k1", "k2", "k3")}
        assert wait_metric(a, "weft_kv_remote_written_blocks_total", lambda v: v >= 3)
        assert redis.call("FLUSHALL") == b"+OK"
        assert complete(b, prompt("k1", 6))["choices"][0]["text"] == refs["k1"]  # a miss: recomputed
        redis.kill()
        errors0 = b.metric("weft_kv_remote_errors_total")
        for t in ("k2", "k3"):  # Redis gone: recomputed, same answers
            assert complete(b, prompt(t, 6))["choices"][0]["text"] == refs[t]
        assert b.metric("weft_kv_remote_errors_total") > errors0
        assert b.metric("weft_kv_remote_up") == 0
        assert complete(a, prompt("k4", 6))["usage"]["completion_tokens"] == 8  # writes fail quietly too
    finally:
        a.stop()
        b.stop()


def test_a_throttled_link_makes_the_instance_recompute(redis):
    a = Server("--kv-remote", "unix://" + redis.sock, threads=1, cpu=0)
    # 256 KiB/s: a 368-KiB block takes 1.4 s, slower than computing its 16 tokens even under ASan
    proxy = SlowProxy(redis.port, 256 << 10)
    proxy.start()
    c = Server("--kv-remote", f"redis://127.0.0.1:{proxy.port}", threads=1, cpu=1)
    try:
        # C computes a prompt of its own first: its prefill rate is measured
        # from a whole prompt, as an instance that has served any would be
        # (the one-token steps after a fetch do not count against it)
        complete(c, prompt("warm-c", 3))
        texts = [prompt(f"slow{i}") for i in range(4)]
        refs = [complete(a, t)["choices"][0]["text"] for t in texts]
        assert wait_metric(a, "weft_kv_remote_written_blocks_total", lambda v: v >= 4 * 12)
        for t, ref in zip(texts, refs):
            assert complete(c, t)["choices"][0]["text"] == ref
        # the link's measured speed loses against the measured prefill rate: recompute, counted
        assert c.metric("weft_kv_remote_decisions_total", {"choice": "recompute"}) >= 1
        assert c.metric("weft_kv_remote_bytes_per_second") < 1 << 20
    finally:
        a.stop()
        c.stop()
        proxy.srv.close()
