"""Start `weft serve` on loopback for the end-to-end tests.

WEFT_BIN names the weft binary (default: build/weft); the model is the
default one (scripts/fetch-model.sh) unless WEFT_MODEL is set. Each server
fixture runs its own process on a free port and is stopped with SIGTERM,
which must drain and exit 0.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEFT = os.environ.get("WEFT_BIN", os.path.join(ROOT, "build", "weft"))


def default_model():
    if os.environ.get("WEFT_MODEL"):
        return os.environ["WEFT_MODEL"]
    cache = os.environ.get("WEFT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "weft")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def parse_labels(text):
    """'a="x",b="y"' -> {"a": "x", "b": "y"} (values without escapes)."""
    return dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', text or ""))


def metric_in(text, name, labels=None):
    want = parse_labels(labels) if isinstance(labels, str) else dict(labels or {})
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r'^([^{\s]+)(?:\{(.*)\})?\s+(\S+)$', line)
        if not m or m.group(1) != name:
            continue
        have = parse_labels(m.group(2))
        if all(have.get(k) == v for k, v in want.items()):
            return float(m.group(3))
    raise KeyError(f"{name} {want}")


def open_stream(port, prompt, max_tokens):
    """A raw socket with a streamed, greedy, ignore_eos completion sent on it."""
    import json
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                       "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s


SANITIZED = os.environ.get("WEFT_SANITIZED", "") in ("1", "ON", "on", "TRUE", "true")

# The fleet secret every test instance and router gets unless a test says
# otherwise (kv_secret=None): shared KV, hand-offs and Redis need one.
KV_SECRET = "weft-test-fleet-secret-0001"


def fleet_credential(secret=KV_SECRET):
    """What a fleet member presents (server/tenants.h weft_fleet_credential)."""
    import hashlib
    import hmac
    return hmac.new(secret.encode(), b"weft fleet member v2", hashlib.sha256).hexdigest()


# the header a fleet member sends: /v1/kv/* and the x-weft-pd headers need it
FLEET_AUTH = {"Authorization": "Bearer " + fleet_credential()}


class Server:
    def __init__(self, *args, model=None, calibrate=False, threads=2, cpu=None, kv_secret=KV_SECRET):
        """calibrate: let the server measure its rates at start (slow under
        ASan; only the tests of /load need it). cpu: pin with taskset -c.
        kv_secret: the fleet secret (None: shared KV off)."""
        self.model = model or default_model()
        self.kv_secret = kv_secret
        if not os.path.exists(self.model):
            pytest.skip(f"model {self.model} is not fetched (bash scripts/fetch-model.sh)")
        if not os.path.exists(WEFT):
            pytest.skip(f"{WEFT} is not built")
        self.args = [*(["taskset", "-c", str(cpu)] if cpu is not None else []),
                     WEFT, "serve", "-m", self.model, "--port", "0", "-t", str(threads),
                     *([] if calibrate else ["--no-calibrate"]),
                     *(["--kv-secret", kv_secret] if kv_secret else []), *args]
        self._start("weft serve")

    def _start(self, what):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://([^:\s]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError(what + " did not start:\n" + "".join(self.log) + self.proc.stderr.read())
        # keep draining stderr so the server never blocks on a full pipe
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.base = f"http://{self.host}:{self.port}"

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def get(self, path, headers=None):
        """GET path; /v1/kv/* as a fleet member (its credential) unless headers say otherwise."""
        if headers is None and path.startswith("/v1/kv/") and getattr(self, "kv_secret", None):
            headers = {"Authorization": "Bearer " + fleet_credential(self.kv_secret)}
        req = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name, labels=None):
        """The value of series `name` whose labels include `labels` (a dict,
        or 'k="v",...' text); every weft series also has model_name."""
        status, text = self.get("/metrics")
        assert status == 200
        return metric_in(text, name, labels)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("weft serve did not drain and exit after SIGTERM")
            assert rc == 0, "weft serve exited with %d after SIGTERM:\n%s" % (rc, "".join(self.log[-30:]))


class Router(Server):
    """`weft router` in front of the given Server instances (their URLs)."""

    def __init__(self, instances, *args, model=None, kv_secret=KV_SECRET):
        self.model = model or default_model()
        if not os.path.exists(WEFT):
            pytest.skip(f"{WEFT} is not built")
        self.args = [WEFT, "router", "-m", self.model, "--port", "0", "--poll-ms", "100",
                     *(["--kv-secret", kv_secret] if kv_secret else []), *args]
        for i in instances:
            self.args += ["--instance", i if isinstance(i, str) else i.base]
        self._start("weft router")

    def wait_ready(self, n_up=None, timeout=60):
        """Until /ready answers 200 (and n_up instances are up): a state, polled."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, text = self.get("/ready")
            if status == 200:
                if n_up is None:
                    return
                _, m = self.get("/metrics")
                up = sum(float(v) for k, v in re.findall(r'^weft_router_instance_up\{([^}]*)\} (\S+)$', m, re.M))
                if up >= n_up:
                    return
            time.sleep(0.05)
        raise AssertionError("the router did not become ready:\n" + "".join(self.log[-20:]))


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id
