#!/usr/bin/env python3
"""A token budget at `weft router` over a long window (the CI test runs 12 s).

One real instance behind a router whose tenant has tokens_per_minute T
(bucket capacity T, refill T/60 per second). From a full bucket, C clients
send small completions for --seconds, honouring every Retry-After. Checks and
prints: tokens served (prompt + completion, from usage) <= capacity +
seconds x refill + the largest request; every 429 carried Retry-After; and a
refused burst of --burst clients that honour it, admitted on their next try.
Usage: bench/admission.py [--seconds 120] [--tpm 300] [--clients 4]
"""
import argparse
import http.client
import json
import math
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet  # noqa: E402


def post(port, key, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Content-Type": "application/json", "Authorization": "Bearer " + key})
    r = c.getresponse()
    d = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(d) if d else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(HERE), "build", "weft"))
    ap.add_argument("--model", default=fleet.default_model())
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--tpm", type=float, default=300)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--burst", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "t.json")
        with open(cfg, "w") as f:
            json.dump({"tenants": [{"name": "tok", "api_keys": ["sk-bench-tok-0001"], "tokens_per_minute": args.tpm},
                                   {"name": "rps", "api_keys": ["sk-bench-rps-0001"], "requests_per_second": 2,
                                    "burst": 5}]}, f)
        inst = fleet.Proc(["taskset", "-c", "0", args.weft, "serve", "-m", args.model, "--port", "0", "-t", "1"],
                          "weft serve")
        router = fleet.Proc([args.weft, "router", "-m", args.model, "--port", "0", "--config", cfg, "--instance",
                             inst.url], "weft router")
        try:
            fleet.wait_ready(router, 1)
            st = {"tokens": 0, "biggest": 0, "ok": 0, "429": 0, "no_retry": 0, "other": 0}
            lock = threading.Lock()
            t_end = time.time() + args.seconds

            def client(i):
                k = 0
                while time.time() < t_end:
                    s, h, j = post(router.port, "sk-bench-tok-0001",
                                   {"prompt": f"Count to three, try {i}-{k}.", "max_tokens": 8, "temperature": 0,
                                    "ignore_eos": True})
                    k += 1
                    with lock:
                        if s == 200:
                            n = j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"]
                            st["tokens"] += n
                            st["biggest"] = max(st["biggest"], n)
                            st["ok"] += 1
                        elif s == 429:
                            st["429"] += 1
                            st["no_retry"] += "retry-after" not in h
                        else:
                            st["other"] += 1
                    if s == 429:
                        time.sleep(min(float(h.get("retry-after", 1)), max(0.0, t_end - time.time())))
            t0 = time.time()
            ts = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            el = time.time() - t0
            bound = args.tpm + el * args.tpm / 60 + st["biggest"]
            print(f"{args.seconds:.0f} s window, tokens_per_minute {args.tpm:.0f}: served {st['tokens']} tokens in "
                  f"{st['ok']} requests ({st['429']} refused, {st['no_retry']} without Retry-After, {st['other']} other); "
                  f"bound capacity + {el:.1f} s x refill + one request = {bound:.0f}: "
                  f"{'within' if st['tokens'] <= bound else 'OVER'} ({100 * st['tokens'] / bound:.1f} % of it)")
            time.sleep(3)
            first = [None] * args.burst

            def one(i):
                first[i] = post(router.port, "sk-bench-rps-0001", {"prompt": f"Burst {i}.", "max_tokens": 2})
            ts = [threading.Thread(target=one, args=(i,)) for i in range(args.burst)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            refused = [i for i in range(args.burst) if first[i][0] == 429]
            t_r = time.time()
            second = {}

            def again(i):
                time.sleep(max(0.0, t_r + int(first[i][1]["retry-after"]) - time.time()))
                second[i] = post(router.port, "sk-bench-rps-0001", {"prompt": f"Burst {i}.", "max_tokens": 2})[0]
            ts = [threading.Thread(target=again, args=(i,)) for i in refused]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            ok2 = sum(1 for v in second.values() if v == 200)
            waits = sorted(int(first[i][1]["retry-after"]) for i in refused)
            print(f"burst of {args.burst} (2 req/s, burst 5): {len(refused)} refused, told Retry-After {waits}; "
                  f"{ok2} of {len(refused)} admitted on their next try "
                  f"({100 * ok2 / max(1, len(refused)):.0f} %, goal >= {math.ceil(95)} %)")
        finally:
            router.stop()
            inst.stop()


if __name__ == "__main__":
    main()
