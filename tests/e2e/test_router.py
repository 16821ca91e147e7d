"""weft router in front of real instances: its block hashes equal the
instances' (predicted cached tokens == reported cached tokens) on a
shared-prefix workload of prompts and multi-turn chats, for a BPE and an SPM
vocabulary; SSE proxied with backpressure (a client that does not read
stalls no one else, a client that leaves aborts the upstream request); the
router's own endpoints; policies; an instance that is down."""
import http.client
import json
import os
import random
import socket
import threading
import time

import pytest

from conftest import ROOT, SANITIZED, Router, Server, metric_in

WORDS = ("the a little girl boy dog cat house tree river forest king queen dragon apple bread water fire "
         "stone castle village road mountain night day sun moon star wind rain snow old young happy sad "
         "big small red blue green gold silver quiet loud fast slow walked ran jumped sang looked found "
         "lost gave took made saw heard knew thought said asked told friend mother father sister brother "
         "teacher farmer baker story song letter book door window garden field boat ship bird fish horse "
         "morning evening winter summer spring autumn because when while after before under over near far").split()

# 1,000 requests in all (600 BPE, 400 SPM); fewer under the sanitizers
N_BPE, N_SPM = (40, 100) if SANITIZED else (600, 400)
STORIES = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
# stories260K has no chat template: chats render with a plain one
PLAIN = os.path.join(ROOT, "tests", "data", "plain-chat.jinja")


def text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def post(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def route_field(hdr, name):
    for part in hdr.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    raise KeyError(name)


def run_workload(router, n_requests, n_groups, doc_words, q_words, threads=4, chat_share=0.4, seed=1):
    """n_groups shared documents; each request is a completion over its
    group's document plus a question, or the next turn of its group's chat.
    A group's requests are sent one after another by one thread (so a
    prefix is stored before it is reused); groups run side by side."""
    rng = random.Random(seed)
    docs = [text(rng, doc_words) for _ in range(n_groups)]
    plan = [[] for _ in range(n_groups)]
    for i in range(n_requests):
        plan[i % n_groups].append("chat" if rng.random() < chat_share else "prompt")
    results = []
    lock = threading.Lock()
    errors = []

    def worker(t):
        conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=120)
        wrng = random.Random(seed * 100 + t)
        for g in range(t, n_groups, threads):
            history = [{"role": "system", "content": docs[g]}]
            for kind in plan[g]:
                if kind == "prompt":
                    body = {"prompt": docs[g] + "\n\nQuestion: " + text(wrng, q_words) + "?", "max_tokens": 2,
                            "temperature": 0}
                    path = "/v1/completions"
                else:
                    history.append({"role": "user", "content": text(wrng, q_words)})
                    body = {"messages": history, "max_tokens": 3, "temperature": 0}
                    path = "/v1/chat/completions"
                status, hdrs, data = post(conn, path, body)
                if status != 200:
                    errors.append((status, data[:300]))
                    return
                j = json.loads(data)
                if kind == "chat":
                    history.append({"role": "assistant", "content": j["choices"][0]["message"]["content"]})
                route = hdrs["x-weft-route"]
                with lock:
                    results.append({"kind": kind, "instance": hdrs["x-weft-instance"],
                                    "predicted": int(route_field(route, "matched")),
                                    "cached": j["usage"]["prompt_tokens_details"]["cached_tokens"],
                                    "prompt": j["usage"]["prompt_tokens"]})
        conn.close()

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
    assert len(results) == n_requests
    return results


def check_hashes(router, results, label):
    n = len(results)
    hit = sum(1 for r in results if r["cached"] > 0) / n
    within = sum(1 for r in results if abs(r["predicted"] - r["cached"]) <= 16) / n
    exact = sum(1 for r in results if r["predicted"] == r["cached"]) / n
    per = {}
    for r in results:
        per[r["instance"]] = per.get(r["instance"], 0) + 1
    chats = sum(1 for r in results if r["kind"] == "chat")
    print(f"\n{label}: {n} requests ({chats} chat turns), hit {hit:.1%}, predicted == reported "
          f"{exact:.1%}, within a block {within:.1%}, per instance {per}")
    assert hit >= 0.80, (hit, results[:5])
    assert within >= 0.95, [r for r in results if abs(r["predicted"] - r["cached"]) > 16][:5]
    assert len(per) >= 2, per  # the groups spread: more than one instance holds prefixes
    # the router's own account agrees with what the clients saw
    _, m = router.get("/metrics")
    total = sum(metric_in(m, "weft_router_cache_predictions_total", {"result": k})
                for k in ("exact", "within_block", "off"))
    assert total == n
    assert metric_in(m, "weft_router_cache_predictions_total", {"result": "exact"}) == round(exact * n)


@pytest.fixture(scope="module")
def bpe_fleet():
    a = Server("--max-conns-per-client", "1024", threads=1, cpu=0)
    b = Server("--max-conns-per-client", "1024", threads=1, cpu=1)
    r = Router([a, b])
    r.wait_ready(n_up=2)
    yield r, a, b
    r.stop()
    a.stop()
    b.stop()


def test_router_hashes_equal_instance_hashes_bpe(bpe_fleet):
    router, _, _ = bpe_fleet
    results = run_workload(router, N_BPE, n_groups=N_BPE // 20, doc_words=60, q_words=8)
    check_hashes(router, results, "SmolLM2 (BPE)")


def test_router_hashes_equal_instance_hashes_spm():
    if not os.path.exists(STORIES):
        pytest.skip("stories260K.gguf is not in ../shared/models")
    a = Server("--chat-template", PLAIN, model=STORIES, threads=1, cpu=0)
    b = Server("--chat-template", PLAIN, model=STORIES, threads=1, cpu=1)
    r = Router([a, b], "--chat-template", PLAIN, model=STORIES)
    try:
        r.wait_ready(n_up=2)
        results = run_workload(r, N_SPM, n_groups=N_SPM // 20, doc_words=30, q_words=6, seed=2)
        check_hashes(r, results, "stories260K (SPM)")
    finally:
        r.stop()
        a.stop()
        b.stop()


def raw_stream(port, body, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def test_router_streams_with_backpressure_and_aborts_on_disconnect(bpe_fleet):
    router, a, b = bpe_fleet
    # a client that never reads its long stream
    stuck = raw_stream(router.port, {"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True,
                                     "stream": True, "temperature": 0}, rcvbuf=4096)
    # the first bytes arrive (headers): the stream is on
    stuck.settimeout(60)
    assert stuck.recv(64).startswith(b"HTTP/1.1 200")
    # meanwhile another stream through the same router runs to its end
    conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=120)
    status, hdrs, data = post(conn, "/v1/completions", {"prompt": "The dragon", "max_tokens": 20, "stream": True,
                                                         "ignore_eos": True, "temperature": 0})
    assert status == 200
    events = [l for l in data.decode().split("\n\n") if l.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) == 22
    conn.close()
    # the stuck client leaves: the router aborts its upstream request, and an instance says so
    def gone():
        return sum(s.metric("weft_request_finish_total", {"reason": "client_gone"}) for s in (a, b))
    before = gone()
    stuck.close()
    deadline = time.time() + 60
    while gone() == before and time.time() < deadline:
        time.sleep(0.05)  # polling a counter for the change, not timing it
    assert gone() == before + 1
    _, m = router.get("/metrics")
    assert metric_in(m, "weft_router_client_disconnects_total") >= 1


def test_router_endpoints(bpe_fleet):
    router, a, b = bpe_fleet
    assert router.get("/health")[0] == 200
    assert router.get("/ready")[0] == 200
    status, body = router.get("/v1/models")
    assert status == 200
    ids = [m["id"] for m in json.loads(body)["data"]]
    assert ids == ["SmolLM2-135M-Instruct.Q4_1"]  # the same model on both: listed once
    assert router.get("/nope")[0] == 404
    # a bad body is answered by the router itself, in the instances' words; no instance sees it
    conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=30)
    status, hdrs, data = post(conn, "/v1/completions", {"prompt": "x", "max_tokens": -5})
    assert status == 400 and "max_tokens" in data.decode()
    assert "x-weft-instance" not in hdrs
    status, hdrs, data = post(conn, "/tokenize", {"content": "hello world"})
    assert status == 200 and hdrs["x-weft-instance"] in (f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}")
    assert json.loads(data)["tokens"]
    conn.close()


def test_round_robin_alternates_and_a_dead_instance_is_skipped():
    a = Server(threads=1, cpu=0)
    b = Server(threads=1, cpu=1)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_url = "http://127.0.0.1:%d" % dead.getsockname()[1]
    dead.close()
    r = Router([a, dead_url, b], "--policy", "round-robin")
    try:
        r.wait_ready(n_up=2)
        conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=60)
        seen = []
        for i in range(6):
            status, hdrs, _ = post(conn, "/v1/completions", {"prompt": "same prompt every time", "max_tokens": 1})
            assert status == 200
            assert "policy=round-robin" in hdrs["x-weft-route"]
            seen.append(hdrs["x-weft-instance"])
        assert len(set(seen)) == 2 and all(seen[i] != seen[i + 1] for i in range(5)), seen
        assert dead_url[7:] not in seen
        _, m = r.get("/metrics")
        assert metric_in(m, "weft_router_instance_up", {"instance": dead_url[7:]}) == 0
        conn.close()
    finally:
        r.stop()
        a.stop()
        b.stop()
