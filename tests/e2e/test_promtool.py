"""`promtool check metrics` (Debian's prometheus package) accepts what
weft serve and weft router expose on /metrics, after traffic of every kind
has filled their series."""
import json
import shutil
import subprocess
import urllib.request

import pytest

from conftest import Router, Server

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (scripts/install-deps.sh)")


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def promtool_ok(srv):
    status, text = srv.get("/metrics")
    assert status == 200
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_promtool_accepts_serve_and_router_metrics():
    s = Server(threads=1)
    r = None
    try:
        r = Router([s])
        for base in (s.base, r.base):
            assert post(base, "/v1/completions", {"prompt": "Hello", "max_tokens": 4}) == 200
            assert post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 4, "stream": True}) == 200
            assert post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "JSON please"}],
                                                       "max_tokens": 8,
                                                       "response_format": {"type": "json_object"}}) == 200
            assert post(base, "/v1/completions", {"prompt": "x", "max_tokens": 0}) == 400
        promtool_ok(s)
        promtool_ok(r)
    finally:
        if r:
            r.stop()
        s.stop()
