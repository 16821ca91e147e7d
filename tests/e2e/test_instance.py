"""What an instance publishes for the router, the dashboard and autoscalers
(FLEET.md, "What an instance publishes"): GET /load and the metrics'
names, checked against what the instance is doing."""
import json
import shutil
import socket
import subprocess
import time
import urllib.request

from conftest import FLEET_AUTH, WEFT, Server, metric_in, open_stream

PROMPT = "Once upon a time, there was a little"


def get_json(srv, path):
    status, body = srv.get(path)
    assert status == 200, body
    return json.loads(body)




def wait_load(srv, pred, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        d = get_json(srv, "/load")
        if pred(d):
            return d
        time.sleep(0.02)
    raise AssertionError("/load never reached the state: " + json.dumps(d))


def test_load_reports_what_the_instance_holds_and_does():
    srv = Server("--max-seqs", "1", "--max-waiting", "8", calibrate=True)
    try:
        d = get_json(srv, "/load")
        assert d["role"] == "both" and not d["draining"]
        assert d["running"] == 0 and d["waiting"] == 0 and d["queued_prefill_tokens"] == 0
        assert d["kv"]["block_tokens"] == 16
        dev = d["kv"]["device"]
        assert dev["total"] == dev["used"] + dev["cached"] + dev["free"] and dev["total"] > 0
        assert d["limits"] == {"max_seqs": 1, "max_waiting": 8, "n_ctx": d["limits"]["n_ctx"]}
        # measured at start, before any traffic
        assert d["prefill_tokens_per_s"] > 0 and d["decode_tokens_per_s"] > 0
        assert d["devices"][0]["backend"] == "cpu" and d["devices"][0]["vendor"] == "cpu"
        # the fingerprint is the model's, as weft info computes it from the file
        info = subprocess.run([WEFT, "info", srv.model], capture_output=True, text=True, check=True).stdout
        fp = [l.split()[1] for l in info.splitlines() if l.startswith("fingerprint:")][0]
        assert d["fingerprint"] == fp and len(fp) == 32
        # one running, one waiting with a known prompt
        a = open_stream(srv.port, PROMPT, 4000)
        got = b""
        while b"data: {" not in got:  # its first token: its queue time is observed
            chunk = a.recv(4096)
            assert chunk
            got += chunk
        wait_load(srv, lambda d: d["running"] == 1)
        long_prompt = " ".join(["word"] * 300)
        b = open_stream(srv.port, long_prompt, 4)
        d = wait_load(srv, lambda d: d["waiting"] == 1)
        assert d["queued_prefill_tokens"] >= 300, d
        assert d["kv"]["device"]["used"] >= 1
        a.close()
        b.close()
        wait_load(srv, lambda d: d["running"] == 0 and d["waiting"] == 0)
        text = srv.get("/metrics")[1]
        assert metric_in(text, "weft_request_queue_seconds_count") >= 1
        assert metric_in(text, "weft_request_finish_total", {"reason": "client_gone"}) >= 1
    finally:
        srv.stop()


def test_metrics_compat_vllm_aliases():
    """--metrics-compat vllm: the names vLLM's v1 engine exports (what its
    Grafana dashboards and llm-d read), equal to weft's own series; promtool
    finds nothing but the ':' in their names."""
    srv = Server("--metrics-compat", "vllm")
    try:
        text = srv.get("/metrics")[1]
        d = get_json(srv, "/load")
        assert metric_in(text, "vllm:num_requests_waiting") == 0
        assert metric_in(text, "vllm:num_requests_running") == 0
        assert 0 <= metric_in(text, "vllm:kv_cache_usage_perc") <= 1
        assert metric_in(text, "vllm:cache_config_info",
                         {"block_size": "16", "num_gpu_blocks": str(d["kv"]["device"]["total"])}) == 1
        assert metric_in(text, "vllm:time_to_first_token_seconds_count") == 0
        for max_tokens in (4, 6):
            req = urllib.request.Request(srv.base + "/v1/completions", data=json.dumps(
                {"prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": True}).encode(),
                headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=120).read()
        wait_load(srv, lambda d: d["running"] == 0 and d["waiting"] == 0)
        text = srv.get("/metrics")[1]
        for v, w in [("time_to_first_token_seconds", "time_to_first_token_seconds"),
                     ("inter_token_latency_seconds", "inter_token_latency_seconds"),
                     ("e2e_request_latency_seconds", "request_duration_seconds"),
                     ("request_queue_time_seconds", "request_queue_seconds")]:
            for part in ("_count", "_sum"):
                assert metric_in(text, "vllm:" + v + part) == metric_in(text, "weft_" + w + part), v + part
        assert metric_in(text, "vllm:time_to_first_token_seconds_count") == 2
        assert metric_in(text, "vllm:inter_token_latency_seconds_count") == 3 + 5
        assert metric_in(text, "vllm:generation_tokens_total") == 10
        assert metric_in(text, "vllm:prompt_tokens_total") == metric_in(text, "weft_prompt_tokens_total") > 0
        assert metric_in(text, "vllm:request_success_total", {"finished_reason": "length"}) == 2
        assert metric_in(text, "vllm:request_success_total", {"finished_reason": "stop"}) == 0
        assert metric_in(text, "vllm:num_preemptions_total") == 0
        promtool = shutil.which("promtool")
        if promtool:
            p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
            problems = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
            assert problems and all(ln.startswith("vllm:") and "should not contain ':'" in ln
                                    for ln in problems), problems
    finally:
        srv.stop()
    srv = Server()
    try:
        assert "vllm:" not in srv.get("/metrics")[1]
    finally:
        srv.stop()


class EventReader:
    """A GET /v1/kv/events subscriber: its parsed events, in order."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.sendall(b"GET /v1/kv/events HTTP/1.1\r\nHost: x\r\nAuthorization: " +
                       FLEET_AUTH["Authorization"].encode() + b"\r\n\r\n")
        self.buf = b""
        self.events = []

    def poll(self, seconds=0.3):
        self.s.settimeout(seconds)
        try:
            while True:
                chunk = self.s.recv(65536)
                if not chunk:
                    break
                self.buf += chunk
        except socket.timeout:
            pass
        found = []
        for part in self.buf.split(b"\n"):
            if part.startswith(b"data: {"):
                found.append(json.loads(part[6:]))
        self.events = found
        return found

    def close(self):
        self.s.close()


def complete(srv, prompt, max_tokens=1):
    return urllib_request(srv, "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})


def urllib_request(srv, path, body):
    import urllib.request
    r = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=120) as resp:
        return json.loads(resp.read())


def test_kv_events_and_index_follow_the_prefix_cache():
    # a small pool (16 blocks at -c 256) so that blocks are evicted too
    srv = Server("-c", "256", "--kv-mib", "1", "--max-seqs", "1")
    try:
        ev = EventReader(srv.port)
        hello = None
        deadline = time.time() + 10
        while time.time() < deadline and not hello:
            got = ev.poll()
            hello = got[0] if got else None
        assert hello["type"] == "hello" and hello["block_tokens"] == 16
        index0 = get_json(srv, "/v1/kv/index")
        assert index0["seq"] == hello["seq"] and index0["count"] == len(index0["blocks"])
        words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
        prompts = [" ".join(words[(i + j) % len(words)] + str(i) for j in range(60)) for i in range(8)]
        n_tokens = []
        for p in prompts:
            n = urllib_request(srv, "/tokenize", {"prompt": p})["count"]
            n_tokens.append(n)
            complete(srv, p)
        # until the events reach what the index says (both are the loop's, in order)
        seq = get_json(srv, "/v1/kv/index")["seq"]
        deadline = time.time() + 30
        while time.time() < deadline and not [e for e in ev.poll() if e["seq"] == seq]:
            pass
        events = [e for e in ev.events if e["type"] != "hello"]
        # numbered one by one from the hello on, no gap
        assert [e["seq"] for e in events] == list(range(hello["seq"] + 1, hello["seq"] + 1 + len(events)))
        stored = [e for e in events if e["type"] == "stored"]
        removed = [e for e in events if e["type"] == "removed"]
        # each prompt's full blocks (max_tokens 1: only the prompt is computed), chained:
        # the first from parent 0, then each from the one before
        assert len(stored) == sum(n // 16 for n in n_tokens), (len(stored), n_tokens)
        firsts = [e for e in stored if e["parent"] == "0" * 16]
        assert len(firsts) == len(prompts)
        hashes = {e["hash"] for e in stored}
        assert all(e["parent"] == "0" * 16 or e["parent"] in hashes or e["parent"] in
                   {b[0] for b in index0["blocks"]} for e in stored)
        # 8 prompts of ~4 blocks each through a 16-block pool: some were evicted, and said so
        assert removed and all(r["hash"] in hashes or r["hash"] in {b[0] for b in index0["blocks"]} for r in removed)
        # the snapshot is the events applied in order, and never holds more than the pool
        idx = get_json(srv, "/v1/kv/index")
        live = {b[0]: b[1] for b in index0["blocks"]}
        for e in events:
            if e["type"] == "stored":
                live[e["hash"]] = e["parent"]
            else:
                live.pop(e["hash"], None)
        assert idx["seq"] == events[-1]["seq"]
        assert {b[0]: b[1] for b in idx["blocks"]} == live
        assert idx["count"] <= get_json(srv, "/load")["kv"]["device"]["total"]
        # a drain ends the subscription (it would hold the drain otherwise)
        srv.stop()
        ev.poll(2)
        assert b'"error"' in ev.buf
        ev.close()
    finally:
        srv.stop()
