"""The dashboards in a real browser: `weft router`'s page at / and its state
at /fleet in front of two real instances (a CPU one and a Vulkan one when a
Vulkan device exists), and `weft serve`'s smaller page. Headless Chromium
(Debian's `chromium`) is driven over the DevTools protocol on a pipe, in
real time (the page polls every second; a virtual-time run would squeeze
its polls into milliseconds and its rates into noise): the page loads,
lists every instance with its device, updates, shows the traffic sent
through the router, and a screenshot is saved (WEFT_DASH_SHOT=1 also copies
it to build/dashboard.png, WEFT_DASH_SHOT=PATH.png there)."""
import base64
import fcntl
import html
import http.client
import json
import os
import re
import select
import shutil
import subprocess
import threading
import time

import pytest

from conftest import ROOT, SANITIZED, WEFT, Router, Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# a tiny model when the shared folder has it: llvmpipe's Vulkan answers in a
# second, not the half minute a 135M model takes it on a busy machine
STORIES = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
MODEL = STORIES if os.path.exists(STORIES) else None
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (apt-get install chromium)")
SLOW = 4 if SANITIZED else 1


class Chromium:
    """Headless Chromium with one page, spoken to over --remote-debugging-pipe
    (fd 3 in, fd 4 out, NUL-separated JSON): no package beyond the browser."""

    def __init__(self, width=1400, height=1000):
        # bash puts the pipe ends on fds 3 and 4 (no preexec_fn: the test has threads);
        # chromium's ends are moved to 10 or above first, so that neither is 3 or 4 already
        to_r, self._w = os.pipe()
        self._r, from_w = os.pipe()
        to_r, from_w = [self._above(fd) for fd in (to_r, from_w)]
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$0" "$@" 3<&{to_r} 4>&{from_w} {to_r}<&- {from_w}>&-',
                                      CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                      "--remote-debugging-pipe", "--no-first-run", f"--window-size={width},{height}",
                                      "about:blank"], pass_fds=(to_r, from_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, page=True)
        self.call("Page.enable", page=True)

    @staticmethod
    def _above(fd):
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return high

    def call(self, method, params=None, page=False, timeout=30):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if page:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            while b"\0" in self._buf:
                raw, _, self._buf = self._buf.partition(b"\0")
                m = json.loads(raw)
                if m.get("id") == self._id:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m["result"]
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"chromium did not answer {method}")
            if select.select([self._r], [], [], left)[0]:
                data = os.read(self._r, 1 << 20)
                if not data:
                    raise RuntimeError("chromium exited")
                self._buf += data

    def open(self, url):
        self.call("Page.navigate", {"url": url}, page=True)

    def eval(self, expr):
        return self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, page=True)["result"].get("value")

    def dom(self):
        return self.eval("document.documentElement.outerHTML")

    def updates(self):
        v = self.eval("document.body ? document.body.dataset.updates : null")
        return int(v) if v else 0

    def wait_updates(self, n, timeout=30):
        deadline = time.time() + timeout * SLOW
        while time.time() < deadline:
            if self.updates() >= n:
                return
            time.sleep(0.1)
        raise AssertionError(f"the page did not update {n} times:\n" + self.dom()[:3000])

    def screenshot(self, path):
        png = self.call("Page.captureScreenshot", {"format": "png"}, page=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


def text_of(fragment):
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split()


def page_state(dom):
    """From a page's DOM: the body's data- attributes, and per table row
    (tr data-instance / data-device) its cells' text by their data-k."""
    body = dict(re.findall(r'data-([a-z]+)="([^"]*)"', re.search(r"<body([^>]*)>", dom).group(1)))
    rows = {}
    for name, inner in re.findall(r'<tr data-(?:instance|device)="([^"]+)">(.*?)</tr>', dom, re.S):
        cells = {}
        for attrs, v in re.findall(r"<td([^>]*)>(.*?)</td>", inner, re.S):
            k = re.search(r'data-k="(\w+)"', attrs)
            if k:
                cells[k.group(1)] = " ".join(text_of(v))
        rows[html.unescape(name)] = {"cells": cells,
                                     "text": " ".join(text_of(inner))}
    return body, rows


def shot_path(tmp, name):
    path = os.path.join(tmp, name)
    print(f"\nscreenshot: {path}")
    return path


def keep_shot(path, name):
    want = os.environ.get("WEFT_DASH_SHOT", "")
    if not want:
        return
    dest = want if want.endswith(".png") and name == "dashboard.png" else os.path.join(ROOT, "build", name)
    shutil.copyfile(path, dest)
    print(f"copied to {dest}")


def has_vulkan():
    out = subprocess.run([WEFT, "devices"], capture_output=True, text=True, timeout=60).stdout
    return re.search(r"^vulkan\s+vulkan:0\s", out, re.M) is not None


@pytest.fixture(scope="module")
def fleet():
    a = Server(model=MODEL, threads=1, cpu=0)
    env_vk = os.environ.pop("WEFT_VK_VALIDATE", None)  # the validation layer is not what is tested here
    try:
        b = Server("--device", "vulkan:0", model=MODEL, threads=1) if has_vulkan() else \
            Server(model=MODEL, threads=1, cpu=1)
    finally:
        if env_vk is not None:
            os.environ["WEFT_VK_VALIDATE"] = env_vk
    # the first batches build a Vulkan device's pipelines: before the part that is watched
    for s in (a, b):
        ts, done, errors = send_traffic(s.port, 0.5)
        for t in ts:
            t.join(timeout=120 * SLOW)
        assert not errors, errors[:3]
    # round-robin: both instances get traffic whatever their measured speeds
    r = Router([a, b], "--policy", "round-robin", model=MODEL)
    r.wait_ready(n_up=2)
    yield a, b, r
    for s in (r, a, b):
        s.stop()


@pytest.fixture(scope="module")
def browser():
    c = Chromium()
    yield c
    c.close()


def fleet_state(router):
    status, body = router.get("/fleet")
    assert status == 200, body
    return json.loads(body)


def send_traffic(port, seconds, threads=4, max_tokens=16):
    """Streamed completions through the router from a few threads until the
    deadline; returns the number answered (each must be)."""
    done, errors = [], []
    deadline = time.time() + seconds

    def worker(t):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        i = 0
        while time.time() < deadline:
            body = {"prompt": f"Story {t}.{i}: once upon a time", "max_tokens": max_tokens, "stream": True,
                    "ignore_eos": True, "temperature": 0}
            conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or b"[DONE]" not in data:
                errors.append((resp.status, data[:200]))
                return
            done.append(1)
            i += 1
        conn.close()

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    return ts, done, errors


INSTANCE_FIELDS = ("name", "url", "device", "vendor", "backend", "role", "state", "healthy", "circuit", "draining",
                   "running", "waiting", "queued_prefill_tokens", "own", "kv", "prefill_tokens_per_s",
                   "decode_tokens_per_s", "requests", "prompt_tokens", "completion_tokens", "ttft_count",
                   "ttft_sum_s", "load_age_s", "device_class")


def test_router_dashboard_shows_the_fleet_live(fleet, browser, tmp_path):
    a, b, r = fleet
    t_start = time.time()
    devices = {}
    for s in (a, b):
        _, load = s.get("/load")
        devices[f"{s.host}:{s.port}"] = json.loads(load)["devices"][0]["name"]

    # the JSON the page polls
    before = fleet_state(r)
    assert before["object"] == "weft.fleet" and before["policy"] == "round-robin"
    for k in ("time_ms", "uptime_s", "model", "routed", "completion_tokens", "queue", "ttft", "instances"):
        assert k in before, k
    assert {x["name"] for x in before["instances"]} == set(devices)
    for x in before["instances"]:
        missing = [k for k in INSTANCE_FIELDS if k not in x]
        assert not missing, missing
        assert x["device"] == devices[x["name"]] and x["state"] == "up", x
        assert set(x["kv"]) >= {"used", "cached", "free", "total", "host_used", "host_total"}

    # the page: served self-contained, every instance listed with its device
    status, page = r.get("/")
    assert status == 200 and page.startswith("<!doctype html>") and "http://" not in page
    browser.open(r.base + "/")
    browser.wait_updates(1)
    body1, rows1 = page_state(browser.dom())
    assert int(body1["instances"]) == 2, body1
    for name, dev in devices.items():
        assert name in rows1, (name, list(rows1))
        assert dev[:20] in rows1[name]["cells"]["device"], rows1[name]
        assert rows1[name]["cells"]["health"] == "healthy", rows1[name]

    # traffic through the router, watched live
    ts, done, errors = send_traffic(r.port, 6)
    mid = browser.updates()
    for t in ts:
        t.join(timeout=120 * SLOW)
    assert not errors, errors[:3]
    assert len(done) >= 4, len(done)
    after = fleet_state(r)
    assert after["routed"] >= before["routed"] + len(done)
    assert after["time_ms"] > before["time_ms"] and after["uptime_s"] > before["uptime_s"]
    assert after["ttft"]["count"] >= before["ttft"]["count"] + len(done)
    b4 = {x["name"]: x for x in before["instances"]}
    for x in after["instances"]:
        p = b4[x["name"]]
        # round-robin: each instance answered some, its counters grew
        assert x["requests"] > p["requests"], (x, p)
        assert x["completion_tokens"] >= p["completion_tokens"] + 16, (x, p)
        assert x["ttft_count"] > p["ttft_count"] and x["ttft_sum_s"] > p["ttft_sum_s"], (x, p)
    assert after["completion_tokens"] == sum(x["completion_tokens"] for x in after["instances"])

    # the page followed: it kept updating and shows the new numbers
    browser.wait_updates(max(mid, browser.updates()) + 2)
    body2, rows2 = page_state(browser.dom())
    assert int(body2["updates"]) >= int(body1["updates"]) + 2
    assert body2["updated"] != body1["updated"]
    for x in after["instances"]:
        c1, c2 = rows1[x["name"]]["cells"], rows2[x["name"]]["cells"]
        assert c2["requests"].split()[0] != c1["requests"].split()[0], (c1, c2)
        assert c2["tokens"].split()[0] != c1["tokens"].split()[0], (c1, c2)
        assert c2["ttft"] != "\u2013", c2
    # the charts drew the traffic: pixels in each instance's colour on the throughput chart
    drawn = browser.eval("""(() => {
        const c = document.getElementById('c-thr'), g = c.getContext('2d');
        const d = g.getImageData(0, 0, c.width, c.height).data;
        const want = [...document.querySelectorAll('#legend i')].slice(0, 2).map(i => getComputedStyle(i).backgroundColor
            .match(/\\d+/g).map(Number));
        return want.map(w => { let n = 0; for (let i = 0; i < d.length; i += 4)
            if (Math.abs(d[i] - w[0]) < 8 && Math.abs(d[i + 1] - w[1]) < 8 && Math.abs(d[i + 2] - w[2]) < 8) n++;
            return n; });
    })()""")
    assert all(n > 20 for n in drawn), drawn

    path = shot_path(str(tmp_path), "dashboard.png")
    browser.screenshot(path)
    assert os.path.getsize(path) > 20000
    keep_shot(path, "dashboard.png")
    print(f"router dashboard: {len(done)} requests, {int(body2['updates'])} updates, "
          f"{time.time() - t_start:.1f} s")


def test_serve_dashboard_polls_load(fleet, browser, tmp_path):
    a, _, _ = fleet
    _, load = a.get("/load")
    j = json.loads(load)
    assert isinstance(j["generated_tokens"], int) and j["generated_tokens"] > 0  # the router test's traffic
    status, page = a.get("/")
    assert status == 200 and page.startswith("<!doctype html>") and "weft serve" in page
    browser.open(a.base + "/")
    browser.wait_updates(1)
    ts, done, errors = send_traffic(a.port, 3, threads=2)
    for t in ts:
        t.join(timeout=120 * SLOW)
    assert not errors, errors[:3]
    browser.wait_updates(browser.updates() + 2)
    body, rows = page_state(browser.dom())
    assert int(body["updates"]) >= 3
    dev = j["devices"][0]
    assert dev["id"] in rows and dev["name"] in rows[dev["id"]]["text"], rows
    model = re.search(r'id="model">([^<]*)<', browser.dom()).group(1)
    assert model == j["model"]
    path = shot_path(str(tmp_path), "dashboard_serve.png")
    browser.screenshot(path)
    assert os.path.getsize(path) > 10000
    keep_shot(path, "dashboard_serve.png")
