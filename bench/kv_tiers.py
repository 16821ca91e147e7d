#!/usr/bin/env python3
"""TTFT of a 900-token prefix served from the host prefix tier or from Redis,
against recomputing it (and against a device hit), on real instances.

Set-ups, alternated --runs times each (weft serve taskset -c 0, -t 1,
-c 1024 and --kv-mib 1: the device holds one context, 64 blocks; the
instances calibrate at start, as by default, so they know their prefill rate):
  host:       --kv-host-mib 256. The prefix P with one question (computed,
              cached), four other 900-token prompts (P leaves the device for
              the host tier), then P with a new question: the figure.
  recompute:  the same without the tier: P is recomputed.
  redis:      a redis-server started here; instance A (core 1) computes P and
              writes it behind; a fresh instance B (core 0) gets P with a new
              question: fetched from Redis.
  throttled:  B reaches Redis through a 4 MiB/s proxy: it fetches one other
              prefix first (and measures the link), then P: it should choose
              recomputing.
The device hit is P once more right after. Prints each run, the medians and
the instances' counters as proof of what served each request.
Usage: bench/kv_tiers.py [--runs 5] [--prefix 900] [--setups host,recompute,redis,throttled]
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet  # noqa: E402


def first_token_s(url, ids):
    host, port = url.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=300)
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    buf = b""
    while b"data: {" not in buf:
        d = r.read1(65536)
        if not d:
            break
        buf += d
    t = time.perf_counter() - t0
    r.read()
    c.close()
    return t


def counter(url, name, label=""):
    m = fleet.get(url, "/metrics")
    v = re.findall(r"^%s\{[^}]*%s[^}]*\} (\S+)$" % (re.escape(name), re.escape(label)), m, re.M)
    return float(v[0]) if v else 0.0


class Redis:
    def __init__(self, tmp):
        self.sock = os.path.join(tmp, "redis.sock")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--unixsocket", self.sock, "--save", "", "--appendonly", "no", "--dir", tmp],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class SlowProxy(threading.Thread):
    """TCP proxy passing at most bps bytes per second each way."""

    def __init__(self, target_port, bps):
        super().__init__(daemon=True)
        self.target, self.bps = target_port, bps
        self.srv = socket.socket()
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
        for x in (a, b):
            x.close()

    def run(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self.pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self.pump, args=(u, c), daemon=True).start()


def serve(args, core, extra):
    return fleet.Proc(["taskset", "-c", str(core), args.weft, "serve", "-m", args.model, "--port", "0", "-t", "1",
                       "-c", "1024", "--kv-mib", str(args.kv_mib)] + extra, "weft serve")


def wait_written(p, n):
    deadline = time.time() + 60
    while counter(p.url, "weft_kv_remote_written_blocks_total") < n and time.time() < deadline:
        time.sleep(0.05)


def one(args, setup, seed, tmp):
    rng = random.Random(seed)
    n_vocab = 49152

    def prompt(n):
        return [rng.randrange(100, n_vocab) for _ in range(n)]
    pfx = prompt(args.prefix)
    procs, redis, proxy = [], None, None
    try:
        if setup in ("host", "recompute"):
            p = serve(args, 0, ["--kv-host-mib", "256"] if setup == "host" else [])
            procs.append(p)
            first_token_s(p.url, pfx + prompt(8))           # P computed and cached
            for _ in range(4):
                first_token_s(p.url, prompt(args.prefix + 8))  # P leaves the device
        else:
            redis = Redis(tmp)
            a = serve(args, 1, ["--kv-remote", "unix://" + redis.sock])
            procs.append(a)
            other = prompt(args.prefix)
            first_token_s(a.url, pfx + prompt(8))
            first_token_s(a.url, other + prompt(8))
            wait_written(a, 2 * (args.prefix // 16))
            url = "unix://" + redis.sock
            if setup == "throttled":
                proxy = SlowProxy(redis.port, 4 << 20)
                proxy.start()
                url = f"redis://127.0.0.1:{proxy.port}"
            p = serve(args, 0, ["--kv-remote", url])
            procs.append(p)
            if setup == "throttled":
                first_token_s(p.url, other + prompt(8))     # measures the link (and the prefill rate)
        hits0 = counter(p.url, "weft_kv_host_hit_tokens_total") + 16 * counter(p.url, "weft_kv_remote_hit_blocks_total")
        pf0 = counter(p.url, "weft_prefill_tokens_total")
        t_back = first_token_s(p.url, pfx + prompt(8))
        hits = counter(p.url, "weft_kv_host_hit_tokens_total") + 16 * counter(p.url, "weft_kv_remote_hit_blocks_total") - hits0
        computed = counter(p.url, "weft_prefill_tokens_total") - pf0
        t_dev = first_token_s(p.url, pfx + prompt(8))   # P is on the device now
        return {"setup": setup, "ttft_ms": 1e3 * t_back, "device_hit_ms": 1e3 * t_dev, "tier_hit_tokens": hits,
                "computed_tokens": computed,
                "decisions": None if setup in ("host", "recompute") else
                {c: counter(p.url, "weft_kv_remote_decisions_total", f'choice="{c}"') for c in ("fetch", "recompute")}}
    finally:
        for x in procs:
            x.stop()
        if redis:
            redis.stop()
        if proxy:
            proxy.srv.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(HERE), "build", "weft"))
    ap.add_argument("--model", default=fleet.default_model())
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prefix", type=int, default=900)
    ap.add_argument("--kv-mib", type=int, default=1, help="device KV; at least one 1024-token context's")
    ap.add_argument("--setups", default="host,recompute,redis,throttled")
    args = ap.parse_args()
    setups = args.setups.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for setup in setups:
                r = one(args, setup, 1000 + i, tmp)
                rows.append(r)
                print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    med = {s: statistics.median(r["ttft_ms"] for r in rows if r["setup"] == s) for s in setups}
    dev = statistics.median(r["device_hit_ms"] for r in rows)
    line = [f"{s} {med[s]:.0f} ms" for s in setups]
    print(f"{args.prefix}-token prefix, TTFT median of {args.runs}: " + ", ".join(line) + f"; device hit {dev:.0f} ms")
    if "recompute" in med:
        for s in setups:
            if s != "recompute":
                print(f"  {s} / recompute = {med[s] / med['recompute']:.2f}")


if __name__ == "__main__":
    main()
