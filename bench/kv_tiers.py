#!/usr/bin/env python3
"""TTFT of a 900-token prefix served from the host prefix tier against
recomputing it (and against a device hit), on one real instance.

weft serve (taskset -c 0, -t 1, -c 1024 and --kv-mib 1: the device holds
one context, 64 blocks, so one such prefix and a little) with
--kv-host-mib 256 ("host") or without ("recompute"). Per run: the prefix P with one question (computed, cached),
then four other 900-token prompts (which push P out of the device: into
the host tier, or away), then P with a new question: its time to the first
token is the figure. The same P + question once more right after is a
device hit. The two set-ups alternate, --runs times each; prints each run
and the medians, with the instance's counters (host-hit tokens) as proof
of what served it. Usage: bench/kv_tiers.py [--runs 5] [--prefix 900]
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import sys
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


def counter(url, name):
    m = fleet.get(url, "/metrics")
    v = re.findall(r"^%s\{[^}]*\} (\S+)$" % re.escape(name), m, re.M)
    return float(v[0]) if v else 0.0


def one(args, host_tier, seed):
    rng = random.Random(seed)
    n_vocab = 49152

    def prompt(n):
        return [rng.randrange(100, n_vocab) for _ in range(n)]
    extra = ["--kv-host-mib", "256"] if host_tier else []
    p = fleet.Proc(["taskset", "-c", "0", args.weft, "serve", "-m", args.model, "--port", "0", "-t", "1",
                    "-c", "1024", "--kv-mib", str(args.kv_mib), "--no-calibrate"] + extra, "weft serve")
    try:
        pfx = prompt(args.prefix)
        first_token_s(p.url, pfx + prompt(8))           # P computed and cached
        for _ in range(4):
            first_token_s(p.url, prompt(args.prefix + 8))  # P leaves the device
        hits0 = counter(p.url, "weft_kv_host_hit_tokens_total")
        pf0 = counter(p.url, "weft_prefill_tokens_total")
        q = prompt(8)
        t_back = first_token_s(p.url, pfx + q)
        hits = counter(p.url, "weft_kv_host_hit_tokens_total") - hits0
        computed = counter(p.url, "weft_prefill_tokens_total") - pf0
        t_dev = first_token_s(p.url, pfx + prompt(8))   # P is on the device now
        return {"setup": "host" if host_tier else "recompute", "ttft_ms": 1e3 * t_back, "device_hit_ms": 1e3 * t_dev,
                "host_hit_tokens": hits, "computed_tokens": computed}
    finally:
        p.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(HERE), "build", "weft"))
    ap.add_argument("--model", default=fleet.default_model())
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prefix", type=int, default=900)
    ap.add_argument("--kv-mib", type=int, default=1, help="device KV; at least one 1024-token context's")
    args = ap.parse_args()
    rows = []
    for i in range(args.runs):
        for tier in (True, False):
            r = one(args, tier, 1000 + i)
            rows.append(r)
            print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    med = {s: statistics.median(r["ttft_ms"] for r in rows if r["setup"] == s) for s in ("host", "recompute")}
    dev = statistics.median(r["device_hit_ms"] for r in rows)
    hits = statistics.median(r["host_hit_tokens"] for r in rows if r["setup"] == "host")
    print(f"{args.prefix}-token prefix, median of {args.runs}: host-tier hit {med['host']:.0f} ms "
          f"({hits:.0f} tokens from host RAM), recompute {med['recompute']:.0f} ms, device hit {dev:.0f} ms; "
          f"host / recompute = {med['host'] / med['recompute']:.2f}")


if __name__ == "__main__":
    main()
