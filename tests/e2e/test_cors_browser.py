"""CORS as a browser does it: headless Chromium (Debian's `chromium`) opens a
page from one origin and calls weft serve and weft router from it with
fetch(). A JSON POST with an Authorization header is not a simple request,
so the browser sends its own preflight first and only then the call: from an
allowed origin the call answers; from another origin the browser refuses it."""
import functools
import http.server
import os
import tempfile
import threading

import pytest

from conftest import Router, Server
from test_dashboard import CHROMIUM, Chromium

pytestmark = pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (apt-get install chromium)")


class Page:
    """A static page on its own loopback port: its origin."""

    def __init__(self):
        self.dir = tempfile.mkdtemp()
        with open(os.path.join(self.dir, "index.html"), "w") as f:
            f.write("<!doctype html><title>client</title><p>client page</p>")
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=self.dir)
        handler.log_message = lambda *a: None
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()


CALL = """fetch(%r + "/v1/chat/completions", {method: "POST",
  headers: {"Content-Type": "application/json", "Authorization": "Bearer none"},
  body: JSON.stringify({messages: [{role: "user", content: "Hi"}], max_tokens: 4})})
 .then(r => r.json().then(j => "ok " + r.status + " " + j.object))
 .catch(e => "refused " + e.name)"""


def call_from(browser, page, api):
    browser.open(page.origin + "/index.html")
    for _ in range(100):
        if browser.eval("document.readyState") == "complete" and browser.eval("location.href").startswith(page.origin):
            break
    r = browser.call("Runtime.evaluate", {"expression": CALL % api, "awaitPromise": True, "returnByValue": True},
                     page=True, timeout=120)
    return r["result"].get("value")


def test_a_browser_page_calls_serve_and_router_from_an_allowed_origin_only():
    allowed, other = Page(), Page()
    s = Server("--cors-origin", allowed.origin, threads=1)
    r = browser = None
    try:
        r = Router([s], "--cors-origin", allowed.origin)
        r.wait_ready(n_up=1)
        browser = Chromium()
        for api in (s.base, r.base):
            assert call_from(browser, allowed, api) == "ok 200 chat.completion", api
            assert call_from(browser, other, api) == "refused TypeError", api
    finally:
        if browser:
            browser.close()
        if r:
            r.stop()
        s.stop()
        allowed.close()
        other.close()
