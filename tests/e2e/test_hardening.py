"""weft serve against a hostile or careless client (the hardening issue):
each case here failed on the server before it. Assertions are on structure
(counters, orders, exit codes), not on speed; waits are bounded polls."""
import json
import os
import random
import signal
import socket
import tempfile
import threading
import time
import urllib.request

import pytest

from conftest import ROOT, Server, metric_in

PROMPT = "Once upon a time, there was a little"


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def metric_value(srv, name, labels=None):
    return srv.metric(name, labels)


def wait_metric(srv, name, pred, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred(srv.metric(name)):
            return True
        time.sleep(0.02)
    return False


def config_file(cfg):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(cfg, f)
    f.close()
    return f.name


def request_bytes(path, body, headers=None):
    body = json.dumps(body).encode()
    extra = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in (headers or {}).items())
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
            % (path.encode(), extra, len(body)) + body)


def post(srv, path, body, headers=None, timeout=60):
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def open_stream(port, body, headers=None, rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(60)
    s.connect(("127.0.0.1", port))
    s.sendall(request_bytes("/v1/completions", dict(body, stream=True), headers))
    return s


def read_all(s, seconds=60, until=None):
    """Everything the socket delivers until EOF (or `until` is seen)."""
    data = b""
    deadline = time.time() + seconds
    s.settimeout(2)
    while time.time() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        if until and until in data:
            break
    return data


# ---- 1. pipelined responses are bounded per connection -------------------

def test_pipelined_client_that_never_reads_is_bounded():
    srv = Server()  # --max-output-kib 1024
    try:
        one = len(srv.get("/metrics")[1].encode()) + 200
        rss0 = rss_mib(srv.proc.pid)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        s.settimeout(2)
        burst = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 64
        sent = 0
        deadline = time.time() + 6
        try:
            while time.time() < deadline and sent < 64 << 20:
                s.sendall(burst)  # blocks once the server stops reading
                sent += len(burst)
        except (socket.timeout, BlockingIOError):
            pass
        rss1 = rss_mib(srv.proc.pid)
        assert rss1 - rss0 < 64, (rss0, rss1, sent)  # tens of MiB at most, not GiB
        # it did try: the answers it asked for are many times the bound
        assert sent // len(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") * one > 10 * 1024 * 1024, sent
        # the server has stopped reading it (past the output bound, the kernel full): from
        # here on no request of it is parsed, so the count moves by our own scrapes only
        while time.time() < deadline + 10 and srv.metric("weft_http_connections_stalled") < 1:
            time.sleep(0.02)
        assert srv.metric("weft_http_connections_stalled") == 1
        served = metric_value(srv, "weft_requests_total", 'endpoint="/metrics",status="200"')
        served2 = metric_value(srv, "weft_requests_total", 'endpoint="/metrics",status="200"')
        peak = srv.metric("weft_http_output_peak_bytes")
        assert peak <= 1024 * 1024 + 2 * one, (peak, one)
        assert served2 - served <= 3  # nothing more is computed for it (our own two scrapes aside)
        assert srv.get("/health")[0] == 200
        s.close()
    finally:
        srv.stop()


# ---- 2. priority is bounded by the tenant ---------------------------------

def first_token_order(srv, blocker, contenders):
    """blocker holds the only slot (--max-seqs 1); contenders queue behind it
    in the order given; returns the contenders' names in the order their
    first tokens came once the blocker is dropped."""
    b = open_stream(srv.port, *blocker)
    assert wait_metric(srv, "weft_requests_running", lambda v: v == 1)
    socks = []
    for i, (name, body, headers) in enumerate(contenders):
        socks.append((name, open_stream(srv.port, body, headers)))
        assert wait_metric(srv, "weft_requests_waiting", lambda v, n=i + 1: v == n)
    order = []
    lock = threading.Lock()

    def reader(name, s):
        data = read_all(s, 60, until=b"data: {")
        with lock:
            if b"data: {" in data:
                order.append(name)

    threads = [threading.Thread(target=reader, args=c) for c in socks]
    for t in threads:
        t.start()
    b.close()
    for t in threads:
        t.join(90)
    for _, s in socks:
        s.close()
    return order


def test_priority_in_the_body_cannot_raise_it_but_a_trusted_header_can():
    cfg = config_file({"tenants": [
        {"name": "low", "api_keys": ["sk-low-00000001"], "priority": 0},
        {"name": "high", "api_keys": ["sk-high-0000001"], "priority": 10},
        {"name": "router", "api_keys": ["sk-router-00001"], "priority": 0, "trusted": True}]})
    srv = Server("--config", cfg, "--max-seqs", "1")
    low = {"Authorization": "Bearer sk-low-00000001"}
    high = {"Authorization": "Bearer sk-high-0000001"}
    router = {"Authorization": "Bearer sk-router-00001"}
    short = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    # the blocker outranks everyone (a trusted header at the top), so no contender preempts it
    blocker = ({"prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True, "temperature": 0},
               dict(router, **{"x-weft-priority": "1000000"}))
    try:
        # low asks for 1000000 first, high (10) comes second: high still goes first
        order = first_token_order(srv, blocker, [("low", dict(short, priority=1000000), low),
                                                 ("high", short, high)])
        assert order == ["high", "low"], order
        # an untrusted tenant's x-weft-priority header is ignored
        order = first_token_order(srv, blocker, [("low", short, dict(low, **{"x-weft-priority": "1000"})),
                                                 ("high", short, high)])
        assert order == ["high", "low"], order
        # the trusted upstream passes the end tenant and its priority (50 > 10)
        order = first_token_order(srv, blocker, [
            ("router", short, dict(router, **{"x-weft-tenant": "low", "x-weft-priority": "50"})),
            ("high", short, high)])
        assert order == ["router", "high"], order
        # a request may still lower its own priority below its tenant's
        order = first_token_order(srv, blocker, [("high", dict(short, priority=-5), high), ("low", short, low)])
        assert order == ["low", "high"], order
    finally:
        srv.stop()
        os.unlink(cfg)



def test_lower_priority_prompts_are_prefilled_in_bounded_chunks_with_the_same_answer():
    """Once a higher priority has been seen, a lower prompt takes at most
    --low-priority-step-ms of a step (the limit is in tokens at the measured
    prefill rate): its prefill spans several steps the counter names, and its
    greedy answer is what it was before the limit applied."""
    cfg = config_file({"tenants": [
        {"name": "low", "api_keys": ["sk-low-00000002"], "priority": 0},
        {"name": "high", "api_keys": ["sk-high-0000002"], "priority": 10}]})
    srv = Server("--config", cfg, "--no-prefix-cache")
    low = {"Authorization": "Bearer sk-low-00000002"}
    high = {"Authorization": "Bearer sk-high-0000002"}
    body = {"prompt": " ".join(f"Line {i}: the tide comes in and goes out." for i in range(30)), "max_tokens": 8,
            "temperature": 0}
    limited = "weft_engine_low_priority_prefill_limited_steps_total"
    try:
        st, _, ref = post(srv, "/v1/completions", body, low)  # only priority 0 so far: it is the top
        ref = json.loads(ref)
        assert st == 200 and ref["usage"]["prompt_tokens"] > 200
        assert srv.metric(limited) == 0
        assert post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, high)[0] == 200
        steps0 = srv.metric("weft_engine_steps_total")
        st, _, again = post(srv, "/v1/completions", body, low)
        again = json.loads(again)
        assert st == 200 and again["choices"][0]["text"] == ref["choices"][0]["text"]
        cap = srv.metric("weft_engine_low_priority_prefill_tokens")
        assert cap >= 16
        n = again["usage"]["prompt_tokens"]
        assert srv.metric(limited) >= 1
        # its prompt went in chunks over several steps, then 7 decode steps (unlimited: 1 + 7); the
        # limit follows the measured rate, which moves between steps, hence n / (2 cap)
        assert srv.metric("weft_engine_steps_total") - steps0 >= max(3, n // (2 * cap)) + 7
    finally:
        srv.stop()
        os.unlink(cfg)

# ---- 3. tokenization runs off the loop thread -----------------------------

def long_text(n_bytes=100_000, seed=1):
    rnd = random.Random(seed)
    words = ("the quick brown fox jumps over lazy dog while seven wizards quietly judge boxing matches near "
             "ancient rivers and mountains").split()
    return " ".join(rnd.choice(words) + rnd.choice(["", "s", "ed", "ing", "ly"]) for _ in range(n_bytes // 5))[:n_bytes]


def test_tokenization_runs_on_workers_not_the_loop():
    srv = Server("-c", "32768")
    text = long_text()
    try:
        st, _, body = post(srv, "/tokenize", {"prompt": text})
        n = json.loads(body)["count"]
        assert st == 200 and 10000 < n < 32768  # fits the context
        stop = threading.Event()
        answers = []

        def client():
            for _ in range(40):
                if stop.is_set():
                    return
                # fits the context, but with max_tokens it does not: refused
                # once tokenized, so the test spends no time on prefill
                st, _, b = post(srv, "/v1/completions", {"prompt": text, "max_tokens": 20000})
                answers.append((st, b))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        # the loop answers while prompts are being tokenized: /metrics itself
        # is the proof (it is served by the loop thread)
        seen = 0
        health = []
        deadline = time.time() + 30
        while time.time() < deadline and seen < 2:
            seen = max(seen, srv.metric("weft_tokenize_pending"))
            health.append(srv.get("/health")[0])
        stop.set()
        for t in threads:
            t.join(120)
        assert seen >= 1, "never saw a prompt being tokenized while the loop answered"
        assert set(health) == {200}
        assert answers and all(st == 400 and "you requested" in b for st, b in answers), answers[:2]
        assert metric_value(srv, "weft_tokenize_total", 'thread="loop"') == 0
        assert metric_value(srv, "weft_tokenize_total", 'thread="worker"') >= len(answers)
    finally:
        srv.stop()


def test_a_prompt_far_past_the_context_is_refused_before_tokenizing():
    # 900 KB cannot be fewer than 900 KB / (the longest vocabulary piece)
    # tokens, which is past a 1024-token context: no tokenizing needed
    srv = Server("-c", "1024")
    try:
        before = metric_value(srv, "weft_tokenize_total", 'thread="worker"')
        st, _, body = post(srv, "/v1/completions", {"prompt": "hello " * 150_000, "max_tokens": 1})
        assert st == 400 and "at least" in body and "maximum context length" in body
        assert metric_value(srv, "weft_tokenize_total", 'thread="worker"') == before
    finally:
        srv.stop()


# ---- 4. signals and shutdown ----------------------------------------------

def test_sighup_reloads_tenants_and_leaves_streams_running():
    cfg = {"tenants": [{"name": "a", "api_keys": ["sk-aaaa-00000001"]}]}
    path = config_file(cfg)
    srv = Server("--config", path)
    try:
        s = open_stream(srv.port, {"prompt": PROMPT, "max_tokens": 150, "ignore_eos": True, "temperature": 0},
                        {"Authorization": "Bearer sk-aaaa-00000001"})
        first = read_all(s, 30, until=b"data: {")
        assert b"data: {" in first
        cfg["tenants"][0]["api_keys"].append("sk-aaaa-00000002")
        with open(path, "w") as f:
            json.dump(cfg, f)
        srv.proc.send_signal(signal.SIGHUP)
        srv.proc.send_signal(signal.SIGUSR1)
        rest = read_all(s, 60, until=b"data: [DONE]")
        s.close()
        assert b"data: [DONE]" in rest and b'"error"' not in rest
        assert srv.proc.poll() is None
        assert wait_metric(srv, "weft_requests_running", lambda v: v == 0)
        st, _, _ = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                        {"Authorization": "Bearer sk-aaaa-00000002"})
        assert st == 200
        assert metric_value(srv, "weft_config_reloads_total", 'result="ok"') == 1
        # a broken file is refused and the old tenants stay
        with open(path, "w") as f:
            f.write("{not json")
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline and metric_value(srv, "weft_config_reloads_total", 'result="error"') < 1:
            time.sleep(0.05)
        st, _, _ = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 1},
                        {"Authorization": "Bearer sk-aaaa-00000002"})
        assert st == 200
    finally:
        srv.stop()
        os.unlink(path)


def test_shutdown_with_slow_peers_exits_within_the_drain_timeout():
    srv = Server("--drain-timeout", "2")
    long_body = {"prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True, "temperature": 0}
    half = socket.create_connection(("127.0.0.1", srv.port))
    half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    unread = open_stream(srv.port, dict(long_body, logprobs=20), rcvbuf=1024)
    reading = open_stream(srv.port, long_body)
    first = read_all(reading, 30, until=b"data: {")
    assert b"data: {" in first
    srv.proc.send_signal(signal.SIGTERM)
    rest = read_all(reading, 30)
    try:
        rc = srv.proc.wait(timeout=25)  # a hang guard: the half-sent request alone held the old server 30 s
    except Exception:
        srv.proc.kill()
        raise AssertionError("weft serve did not exit after the drain timeout")
    assert rc == 0
    # it exited because the deadline passed, with both slow peers still connected
    srv.reader.join(10)
    log = "".join(srv.log)
    assert "drain timeout: ending" in log, log[-2000:]
    assert half.fileno() >= 0 and unread.fileno() >= 0
    # the stream cut at the deadline says so before it ends
    assert b'data: {"error"' in rest and b"data: [DONE]" not in rest
    for s in (half, unread, reading):
        s.close()


def test_second_sigterm_ends_the_drain_at_once():
    srv = Server()  # drain timeout 30 s
    s = open_stream(srv.port, {"prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True, "temperature": 0})
    assert b"data: {" in read_all(s, 30, until=b"data: {")
    srv.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 20  # the second one only once the first has started the drain
    while time.time() < deadline and not any("SIGTERM, draining" in l for l in srv.log):
        time.sleep(0.02)
    srv.proc.send_signal(signal.SIGTERM)
    rest = read_all(s, 20)
    try:
        rc = srv.proc.wait(timeout=20)
    except Exception:
        srv.proc.kill()
        raise AssertionError("a second SIGTERM did not end the server")
    assert rc == 0
    assert b'data: {"error"' in rest
    srv.reader.join(10)
    assert "SIGTERM: ending" in "".join(srv.log)
    s.close()


# ---- 5. budgets ------------------------------------------------------------

def test_request_bigger_than_the_whole_budget_is_429_at_once():
    # a small budget: the default-length chat below may generate all of it
    path = config_file({"tenants": [{"name": "t", "api_keys": ["sk-tttt-00000001"], "tokens_per_minute": 600}]})
    srv = Server("--config", path)
    auth = {"Authorization": "Bearer sk-tttt-00000001"}
    try:
        # caught before tokenizing (max_tokens alone is the whole budget)
        st, headers, body = post(srv, "/v1/completions", {"prompt": "hello", "max_tokens": 600}, auth)
        assert st == 429 and "tokens_per_minute" in body and "never" in body, body
        assert "Retry-After" not in headers
        # caught once tokenized: ~1700 prompt tokens + 100
        st, headers, body = post(srv, "/v1/completions", {"prompt": "one two three " * 570, "max_tokens": 100}, auth)
        assert st == 429 and "tokens_per_minute" in body and "never" in body, body
        # and the tenant is not locked out by them
        st, _, _ = post(srv, "/v1/completions", {"prompt": "hello", "max_tokens": 2}, auth)
        assert st == 200
        # a chat that gives no max_tokens defaults to what fits the budget (not to the
        # context, which is more than the budget): it is admitted once the bucket is full
        for _ in range(3):
            st, headers, body = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                                   "temperature": 0}, auth, timeout=120)
            if st != 429:
                break
            assert "never" not in body, body
            time.sleep(float(headers["Retry-After"]))
        assert st == 200, body
    finally:
        srv.stop()
        os.unlink(path)


def test_queue_full_retry_after_is_the_predicted_drain_time():
    srv = Server("--max-seqs", "1", "--max-waiting", "1")
    try:
        # one request's worth of measured time: at least a second
        t0 = time.time()
        st, _, _ = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 400, "ignore_eos": True}, timeout=120)
        took = time.time() - t0
        assert st == 200
        long_body = {"prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True, "temperature": 0}
        a = open_stream(srv.port, long_body)
        assert wait_metric(srv, "weft_requests_running", lambda v: v == 1)
        b = open_stream(srv.port, long_body)
        assert wait_metric(srv, "weft_requests_waiting", lambda v: v == 1)
        st, headers, body = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 1})
        assert st == 503
        ra = int(headers["Retry-After"])
        # (waiting + this one) x the mean request time / the running ones
        assert ra >= 2 and ra >= int(2 * took * 0.9), (ra, took)
        a.close()
        b.close()
    finally:
        srv.stop()


# ---- 6. the smaller ones ---------------------------------------------------

def test_per_client_connection_limit_spares_a_trusted_upstream():
    path = config_file({"allow_anonymous": True, "tenants": [
        {"name": "router", "api_keys": ["sk-router-00001"], "trusted": True},
        {"name": "user", "api_keys": ["sk-user-0000001"]}]})
    srv = Server("--config", path)  # --max-conns-per-client 64
    try:
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(64)]
        # until the server has accepted all 64, asked from another address (this one is at its limit)
        def conns():
            q = socket.create_connection(("127.0.0.1", srv.port), timeout=10, source_address=("127.0.0.3", 0))
            q.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            text = read_all(q, 10).decode(errors="replace")
            q.close()
            return metric_in(text, "weft_http_connections")
        deadline = time.time() + 30
        while time.time() < deadline and conns() < 65:
            time.sleep(0.02)
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-user-0000001\r\n\r\n")
        data = read_all(s, 10)
        s.close()
        assert data.startswith(b"HTTP/1.1 429") and b"too many connections" in data, data[:200]
        assert b"Connection: close" in data
        # the probes are answered past the limit (an orchestrator's checks come from the same
        # address as everything else it holds open), then the connection closes
        for probe in (b"/health", b"/ready"):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(b"GET " + probe + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            data = read_all(s, 10)
            s.close()
            assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data, data[:200]
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-router-00001\r\n\r\n")
        data = read_all(s, 10, until=b'"ok"}')
        assert data.startswith(b"HTTP/1.1 200") and b"Connection: keep-alive" in data, data[:200]
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # still exempt on the same connection
        assert read_all(s, 10, until=b'"ok"}').startswith(b"HTTP/1.1 200")
        s.close()
        for c in idle:
            c.close()
        assert srv.metric("weft_rejected_connections_total") == 1
    finally:
        srv.stop()
        os.unlink(path)


def test_logprob_strings_concatenate_to_the_text_sentencepiece():
    model = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
    if not os.path.exists(model):
        pytest.skip("stories260K.gguf is not in ../shared/models")
    srv = Server(model=model)
    try:
        st, _, body = post(srv, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40,
                                                    "temperature": 0, "logprobs": 5})
        assert st == 200
        ch = json.loads(body)["choices"][0]
        lp = ch["logprobs"]
        assert "".join(lp["tokens"]) == ch["text"]
        assert sum(t.startswith(" ") for t in lp["tokens"]) >= 3
        # no two alternatives collapse into one key
        assert all(len(top) == 5 for top in lp["top_logprobs"]), [len(t) for t in lp["top_logprobs"]]
        # streamed: the chunks' texts and token strings agree too
        s = open_stream(srv.port, {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "logprobs": 1})
        data = read_all(s, 30, until=b"data: [DONE]").decode(errors="replace")
        s.close()
        texts, toks = [], []
        for line in data.splitlines():
            if line.startswith("data: {"):
                c = json.loads(line[6:])["choices"][0]
                texts.append(c["text"])
                if c["logprobs"]:
                    toks.extend(c["logprobs"]["tokens"])
        assert "".join(texts) == ch["text"] == "".join(toks)
    finally:
        srv.stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def test_metrics_behind_a_key_or_on_its_own_listener():
    srv = Server("--metrics-key", "mk-secret-0001")
    try:
        assert srv.get("/metrics")[0] == 401
        st, text = srv.get("/metrics", {"Authorization": "Bearer mk-secret-0001"})
        assert st == 200 and "weft_requests_total" in text
        assert srv.get("/health")[0] == 200
    finally:
        srv.stop()
    port = free_port()
    srv = Server("--metrics-port", str(port))
    try:
        assert srv.get("/metrics")[0] == 404
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200 and b"weft_requests_total" in r.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10)
        assert e.value.code == 404
    finally:
        srv.stop()
