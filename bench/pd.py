#!/usr/bin/env python3
"""Prefill/decode disaggregation on real instances (SmolLM2, -t 1, taskset).

  itl:       decode inter-token latency while long prompts arrive. Decoders
             (--decoders closed-loop streams of short prompts, --decode-tokens
             each, restarted when done) run for --seconds; every --long-every
             seconds a --long-words prompt (about 3.4 tokens a word) arrives.
             Set-ups, alternated --runs times, same cores and settings:
               pd:   instance P (core 0, --role prefill) and D (core 1,
                     --role decode) behind a router (--pd-threshold 512):
                     the long prompts are computed on P and decoded on D.
               both: instances A (core 0) and B (core 1) doing both.
             Reports the decoders' ITL p50/p99 (every gap between two chunks
             after the first), the long prompts' TTFT, the decoders' tokens/s.
  equality:  --prompts prompts of 100 to --max-prompt tokens (random, seeded),
             --concurrency at a time, through a router in front of P and D
             (--pd-threshold 64: all handed off), against one instance
             doing it all (core 1, at the same time); greedy, --max-tokens.
             Counts the answers that differ (must be 0) and the counters
             that show the hand-offs (D's prefill tokens: only the tails).
Usage: bench/pd.py [--mode itl|equality] [--runs 3] [--seconds 60] [--prompts 100]
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet  # noqa: E402

WORDS = ("amber basalt cedar delta ember fjord garnet harbor indigo juniper kelp lagoon marble nectar onyx "
         "prairie quartz russet sierra tundra umber velvet willow xenon yarrow zephyr").split()


def prompt_of(seed, n_words):
    return f"Log {seed}: " + " ".join(f"{WORDS[(seed * 7 + i * 5) % len(WORDS)]}{(seed + i) % 97}"
                                      for i in range(n_words))


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def stream(port, prompt, max_tokens, timeout=600):
    """Chunk arrival times (perf_counter) of a streamed greedy completion, and its text."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                                     "ignore_eos": True, "stream": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        body = r.read()
        c.close()
        raise RuntimeError(f"HTTP {r.status}: {body[:200]}")
    times, text = [], []
    for line in r:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        ev = json.loads(line[6:])
        if ev.get("choices") and ev["choices"][0].get("text"):
            times.append(time.perf_counter())
            text.append(ev["choices"][0]["text"])
    c.close()
    return t0, times, "".join(text)


def complete(port, prompt, max_tokens, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                                     "ignore_eos": True}), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {out}")
    return out


def metric(url, name, labels=""):
    text = fleet.get(url, "/metrics")
    for line in text.splitlines():
        if line.startswith(name + "{") and labels in line or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def start(args, cpu, *extra):
    return fleet.Proc(["taskset", "-c", str(cpu), args.weft, "serve", "-m", args.model, "--port", "0", "-t", "1",
                       "-c", "4096", *extra], "weft serve")


def router(args, insts, *extra):
    r = fleet.Proc([args.weft, "router", "-m", args.model, "--port", "0", "--poll-ms", "100", *extra,
                    *sum((["--instance", i.url] for i in insts), [])], "weft router")
    fleet.wait_ready(r, len(insts))
    return r


def itl_run(args, setup, run):
    if setup == "pd":
        insts = [start(args, 0, "--role", "prefill"), start(args, 1, "--role", "decode")]
    else:
        insts = [start(args, 0), start(args, 1)]
    r = router(args, insts)
    port = r.port
    stop = threading.Event()
    gaps, dec_tokens, long_ttft, errors = [], [0], [], [0]
    lock = threading.Lock()

    def decoder(k):
        i = 0
        while not stop.is_set():
            try:
                _, times, _ = stream(port, prompt_of(1000 * run + 100 * k + i, 14), args.decode_tokens)
            except Exception:  # noqa: BLE001
                with lock:
                    errors[0] += 1
                continue
            i += 1
            with lock:
                gaps.extend(b - a for a, b in zip(times, times[1:]))
                dec_tokens[0] += len(times)

    def long_prompts():
        j = 0
        while not stop.wait(args.long_every if j else 1.0):
            def one(seed):
                try:
                    t0, times, _ = stream(port, prompt_of(seed, args.long_words), 8)
                    with lock:
                        long_ttft.append(times[0] - t0)
                except Exception:  # noqa: BLE001
                    with lock:
                        errors[0] += 1
            threading.Thread(target=one, args=(50000 + 1000 * run + j,), daemon=True).start()
            j += 1

    threads = [threading.Thread(target=decoder, args=(k,)) for k in range(args.decoders)]
    threads.append(threading.Thread(target=long_prompts))
    t0 = time.time()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.time() - t0
    handoffs = metric(r.url, "weft_router_pd_started_total")
    for p in [r, *insts]:
        p.stop()
    return {"setup": setup, "run": run, "itl_p50_ms": 1e3 * pct(gaps, 50), "itl_p99_ms": 1e3 * pct(gaps, 99),
            "itl_max_ms": 1e3 * max(gaps) if gaps else float("nan"), "gaps": len(gaps),
            "decode_tok_s": dec_tokens[0] / wall, "long_n": len(long_ttft),
            "long_ttft_p50_s": pct(long_ttft, 50), "long_ttft_max_s": max(long_ttft) if long_ttft else float("nan"),
            "handoffs": handoffs, "errors": errors[0]}


def itl(args):
    rows = []
    for run in range(args.runs):
        for setup in ("pd", "both") if run % 2 == 0 else ("both", "pd"):
            row = itl_run(args, setup, run)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\nmedians over runs:")
    med = {}
    for setup in ("pd", "both"):
        rs = [r for r in rows if r["setup"] == setup]
        med[setup] = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k not in ("setup", "run")}
        print(f"  {setup:5s} " + "  ".join(f"{k}={v:.3f}" for k, v in med[setup].items()))
    print(f"\nITL p99: both / pd = {med['both']['itl_p99_ms'] / med['pd']['itl_p99_ms']:.2f}x "
          f"(per run: {', '.join('%.2f' % (b['itl_p99_ms'] / p['itl_p99_ms']) for p, b in zip([r for r in rows if r['setup'] == 'pd'], [r for r in rows if r['setup'] == 'both']))})")


def equality(args):
    p = start(args, 0, "--role", "prefill")
    d = start(args, 1, "--role", "decode")
    o = start(args, 1)
    r = router(args, [p, d], "--pd-threshold", "64")
    rng = random.Random(args.seed)
    prompts = [prompt_of(7000 + i, rng.randint(30, int(args.max_prompt / 3.4))) for i in range(args.prompts)]
    base = {u: metric(u, "weft_prefill_tokens_total") for u in (p.url, d.url)}
    res_pd, res_o = {}, {}

    def worker(port, out, idx):
        for i in idx:
            out[i] = complete(port, prompts[i], args.max_tokens)

    t0 = time.time()
    ths = [threading.Thread(target=worker, args=(r.port, res_pd, range(k, args.prompts, args.concurrency)))
           for k in range(args.concurrency)]
    ths.append(threading.Thread(target=worker, args=(o.port, res_o, range(args.prompts))))
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.time() - t0
    lengths = [res_o[i]["usage"]["prompt_tokens"] for i in range(args.prompts)]
    differ = [i for i in range(args.prompts) if res_pd[i]["choices"][0]["text"] != res_o[i]["choices"][0]["text"]]
    tails = sum(n - (n - 1) // 16 * 16 for n in lengths)
    d_prefill = metric(d.url, "weft_prefill_tokens_total") - base[d.url]
    p_prefill = metric(p.url, "weft_prefill_tokens_total") - base[p.url]
    print(json.dumps({"prompts": args.prompts, "tokens_min": min(lengths), "tokens_max": max(lengths),
                      "tokens_total": sum(lengths), "differ": len(differ), "differ_idx": differ[:10],
                      "handoffs": metric(r.url, "weft_router_pd_started_total"),
                      "handoffs_ok": metric(r.url, "weft_router_pd_handoffs_total", 'result="ok"'),
                      "decode_complete": metric(d.url, "weft_pd_requests_total", 'outcome="complete"'),
                      "decode_fallbacks": metric(d.url, "weft_pd_fallbacks_total"),
                      "decode_prefill_tokens": d_prefill, "tails": tails, "prefill_prefill_tokens": p_prefill,
                      "pushed_blocks": metric(p.url, "weft_pd_pushed_blocks_total"),
                      "push_batches": metric(p.url, "weft_pd_push_batches_total"),
                      "pinned_after": json.loads(fleet.get(d.url, "/load"))["kv"]["device"]["pinned"],
                      "wall_s": wall}, indent=1))
    for x in (r, p, d, o):
        x.stop()
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("itl", "equality"), default="itl")
    ap.add_argument("--weft", default=os.path.join(fleet.ROOT, "build", "weft"))
    ap.add_argument("--model", default=fleet.default_model())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--decoders", type=int, default=8)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--long-words", type=int, default=530, help="about 1,800 tokens")
    ap.add_argument("--long-every", type=float, default=10)
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--max-prompt", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=1, help="equality: a second prompt at once finds P busy and D computes it itself (as the policy says)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.mode == "itl":
        itl(args)
        return 0
    return equality(args)


if __name__ == "__main__":
    sys.exit(main())
