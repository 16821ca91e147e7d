#!/usr/bin/env python3
"""A high-priority tenant's TTFT under 2x overload, through `weft router`.

Two real instances (taskset, -t 1, --max-seqs 4, the same --config, whose
trusted key the router uses) behind a router with two tenants: "hi"
(priority 10) and "lo" (priority 0). Per run:
  1. capacity: lo alone, closed loop at 4x the fleet's slots -> requests/s C
  2. unloaded: hi alone, Poisson at --hi-rate -> its TTFT p99
  3. overload: lo Poisson at 2 x C (shed requests count as lo errors) and the
     same hi stream, with GET /health every 20 ms -> hi TTFT p99, /health p99
Each run does this for each set-up of --setups, interleaved:
  queue:      the router's queue on (--saturate-waiting 2, the default),
              instances as they come (--low-priority-step-ms 40)
  no-queue:   --saturate-waiting 1048576 (every request goes straight to an
              instance, whose own queue orders by priority)
  ...-lpmsN:  the instances run with --low-priority-step-ms N (0: lower
              prompts' chunks as large as the step budget)
Prints each run, then per set-up the medians over runs and the p99 ratio of
all runs' samples pooled.
Usage: bench/overload.py [--runs 3] [--seconds 40] [--setups queue,queue-lpms0,no-queue] [--out F]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet  # noqa: E402

KEYS = {"hi": "sk-overload-hi-0001", "lo": "sk-overload-lo-0001"}


def loadgen(args, url, key, extra, out):
    cmd = [sys.executable, os.path.join(HERE, "loadgen.py"), "--url", url, "--api-key", key, "--prompt-tokens",
           "64", "--max-tokens", str(args.max_tokens), "--ignore-eos", "--json", out] + extra
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def result(p, path):
    p.wait()
    with open(path) as f:
        return json.load(f)


def health_probe(url, stop, lat):
    host, port = url.replace("http://", "").split(":")
    while not stop.is_set():
        t = time.perf_counter()
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=10)
            c.request("GET", "/health")
            c.getresponse().read()
            c.close()
            lat.append(time.perf_counter() - t)
        except OSError:
            lat.append(10.0)
        time.sleep(0.02)


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


def parse_setup(label):
    base, _, lpp = label.partition("-lpms")
    if base not in ("queue", "no-queue") or (lpp and not lpp.isdigit()):
        raise SystemExit(f"overload.py: unknown set-up {label!r} (queue, no-queue, optionally -lpmsN)")
    return label, 2 if base == "queue" else 1 << 20, int(lpp) if lpp else None


def one(args, setup, tmp):
    label, sat, lpp = setup
    cfg = os.path.join(tmp, "tenants.json")
    with open(cfg, "w") as f:
        # the instances get the same file: they trust the router's key, which passes each
        # request's tenant and priority on (x-weft-tenant, x-weft-priority)
        json.dump({"tenants": [{"name": "hi", "api_keys": [KEYS["hi"]], "priority": 10},
                               {"name": "lo", "api_keys": [KEYS["lo"]], "priority": 0},
                               {"name": "router", "api_keys": ["sk-overload-router-01"], "trusted": True,
                                "priority": 10}]}, f)
    insts = [fleet.Proc(["taskset", "-c", str(i), args.weft, "serve", "-m", args.model, "--port", "0", "-t", "1",
                         "--max-seqs", "4", "--config", cfg] + ([] if lpp is None else ["--low-priority-step-ms", str(lpp)]),
                        "weft serve") for i in range(2)]
    router = fleet.Proc([args.weft, "router", "-m", args.model, "--port", "0", "--config", cfg,
                         "--saturate-waiting", str(sat), "--queue-max", "256", "--queue-per-tenant", "192"]
                        + sum([["--instance", p.url] for p in insts], []), "weft router")
    try:
        fleet.wait_ready(router, 2)
        cap = result(loadgen(args, router.url, KEYS["lo"], ["-c", "32", "-n", "64"], f"{tmp}/cap.json"),
                     f"{tmp}/cap.json")["requests_per_s"]
        n_hi = max(8, int(args.hi_rate * args.seconds * 0.75))
        un = result(loadgen(args, router.url, KEYS["hi"], ["--rate", str(args.hi_rate), "-n", str(n_hi), "--seed", "7"],
                            f"{tmp}/hi0.json"), f"{tmp}/hi0.json")
        stop, lat = threading.Event(), []
        th = threading.Thread(target=health_probe, args=(router.url, stop, lat), daemon=True)
        th.start()
        lo = loadgen(args, router.url, KEYS["lo"], ["--rate", str(2 * cap), "-n", str(int(2 * cap * args.seconds)),
                                                   "--seed", "3"], f"{tmp}/lo.json")
        time.sleep(args.seconds * 0.2)  # the overload builds up first
        hi = result(loadgen(args, router.url, KEYS["hi"], ["--rate", str(args.hi_rate), "-n", str(n_hi), "--seed", "9"],
                            f"{tmp}/hi1.json"), f"{tmp}/hi1.json")
        lo_r = result(lo, f"{tmp}/lo.json")
        stop.set()
        th.join()
        return {"setup": label, "capacity_rps": cap, "hi_unloaded_p99_ms": un["ttft_ms"]["p99"],
                "hi_overload_p99_ms": hi["ttft_ms"]["p99"], "un_samples": un["ttft_samples_ms"],
                "hi_samples": hi["ttft_samples_ms"], "ratio": hi["ttft_ms"]["p99"] / un["ttft_ms"]["p99"],
                "hi_errors": hi["errors"], "lo_ok": lo_r["ok"], "lo_refused": lo_r["errors"],
                "lo_ttft_p99_ms": lo_r["ttft_ms"]["p99"], "health_p99_ms": 1e3 * p99(lat)}
    finally:
        router.stop()
        for p in insts:
            p.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(HERE), "build", "weft"))
    ap.add_argument("--model", default=fleet.default_model())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--setups", default="queue,queue-lpms0,no-queue")
    ap.add_argument("--out", default=None, help="write every run, TTFT samples included, here (JSON)")
    ap.add_argument("--hi-rate", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    setups = [parse_setup(x) for x in args.setups.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for setup in setups:
                r = one(args, setup, tmp)
                rows.append(r)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()
                                  if not k.endswith("_samples")}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f)
    for label, _, _ in setups:
        rs = [r for r in rows if r["setup"] == label]
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "setup" and not k.endswith("_samples")}
        pool_un, pool_hi = p99(sum((r["un_samples"] for r in rs), [])), p99(sum((r["hi_samples"] for r in rs), []))
        print(f"{label:10s}: median of {len(rs)}: capacity {med['capacity_rps']:.2f} req/s; "
              f"hi TTFT p99 {med['hi_unloaded_p99_ms']:.0f} ms unloaded -> {med['hi_overload_p99_ms']:.0f} ms at 2x "
              f"overload ({med['ratio']:.2f}x; pooled over runs {pool_un:.0f} -> {pool_hi:.0f} ms, "
              f"{pool_hi / pool_un:.2f}x); lo ok {med['lo_ok']:.0f}, refused {med['lo_refused']:.0f}, "
              f"lo TTFT p99 {med['lo_ttft_p99_ms']:.0f} ms; /health p99 {med['health_p99_ms']:.1f} ms")


if __name__ == "__main__":
    main()
