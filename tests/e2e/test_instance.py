"""What an instance publishes for the router, the dashboard and autoscalers
(FLEET.md, "What an instance publishes"): GET /load and the metrics'
names, checked against what the instance is doing."""
import json
import socket
import subprocess
import time

from conftest import WEFT, Server, metric_in

PROMPT = "Once upon a time, there was a little"


def get_json(srv, path):
    status, body = srv.get(path)
    assert status == 200, body
    return json.loads(body)


def open_stream(port, prompt, max_tokens):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                       "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s


def wait_load(srv, pred, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        d = get_json(srv, "/load")
        if pred(d):
            return d
        time.sleep(0.02)
    raise AssertionError("/load never reached the state: " + json.dumps(d))


def test_load_reports_what_the_instance_holds_and_does():
    srv = Server("--max-seqs", "1", "--max-waiting", "8")
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
        status, body = srv.get("/metrics")
        a = open_stream(srv.port, PROMPT, 4000)
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
    srv = Server("--metrics-compat", "vllm")
    try:
        text = srv.get("/metrics")[1]
        d = get_json(srv, "/load")
        assert metric_in(text, "vllm:num_requests_waiting") == 0
        assert metric_in(text, "vllm:num_requests_running") == 0
        assert 0 <= metric_in(text, "vllm:kv_cache_usage_perc") <= 1
        assert metric_in(text, "vllm:cache_config_info",
                         {"block_size": "16", "num_gpu_blocks": str(d["kv"]["device"]["total"])}) == 1
    finally:
        srv.stop()
    srv = Server()
    try:
        assert "vllm:" not in srv.get("/metrics")[1]
    finally:
        srv.stop()
