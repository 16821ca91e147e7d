#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible server (weft serve, vLLM, llama.cpp).

Streams /v1/completions requests at a fixed concurrency (or a Poisson request
rate) and reports aggregate generated tokens/s, time to first token (TTFT),
inter-token latency (ITL) and request latency with P50/P90/P99, as a table,
as JSON (--json FILE) and as a PNG plot (--plot FILE, needs matplotlib).

  bench/loadgen.py --url http://127.0.0.1:8080 -n 32 -c 8 --prompt-tokens 110 \
      --max-tokens 64 --ignore-eos --json out.json --plot out.png

Prompts are distinct (no prefix-cache hits) and sized with the server's
/tokenize when it has one, else by word count. Tokens are counted from the
final usage chunk (stream_options.include_usage), else one per content chunk.

--shared-prefix takes SGLang's generated-shared-prefix workload: --gsp-num-groups
groups, each with a system prompt of --gsp-system-prompt-len tokens shared by
its --gsp-prompts-per-group requests, each adding a question of
--gsp-question-len tokens and asking for --gsp-output-len tokens; requests
are shuffled. --gsp-hot-share F sends a fraction F of all requests to group 0
(one hot prefix). The prefix hit rate comes from the answers' cached_tokens,
the per-instance share from weft router's x-weft-instance header.
Standard library only (plus matplotlib for the plot).
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("time people year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact river mountain garden kitchen window morning evening "
         "music story letter question answer reason friend family history science market animal country").split()


def request(url, method, path, body=None, headers=None, timeout=600):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def count_tokens(url, text, headers):
    try:
        conn, r = request(url, "POST", "/tokenize", {"prompt": text, "add_special": False}, headers)
        data = r.read()
        conn.close()
        if r.status == 200:
            return len(json.loads(data)["tokens"])
    except (OSError, ValueError, KeyError):
        pass
    return None


def make_prompts(url, n, target, headers, seed):
    rng = random.Random(seed)
    prompts = []
    for i in range(n):
        words = [f"Request {i}:"]
        text = " ".join(words)
        while True:
            words.append(rng.choice(WORDS))
            text = " ".join(words)
            if len(words) % 8 == 0 or len(words) >= target:
                k = count_tokens(url, text, headers)
                if k is None:
                    if len(words) >= int(target * 0.75):  # ~1.33 tokens per English word
                        break
                elif k >= target:
                    break
        prompts.append(text)
    return prompts


def tokens_per_word(url, headers, rng):
    """Measured once with /tokenize on a sample (1.33 when the server has none)."""
    sample = " ".join(rng.choice(WORDS) for _ in range(400))
    k = count_tokens(url, sample, headers)
    return k / 400 if k else 1.33


def make_shared_prefix(url, args, headers):
    """(prompt, group) pairs of SGLang's generated-shared-prefix workload."""
    rng = random.Random(args.seed)
    tpw = tokens_per_word(url, headers, rng)
    words = lambda n_tokens: " ".join(rng.choice(WORDS) for _ in range(max(1, round(n_tokens / tpw))))
    systems = [f"System {g}: " + words(args.gsp_system_prompt_len) for g in range(args.gsp_num_groups)]
    n = args.gsp_num_groups * args.gsp_prompts_per_group
    if args.gsp_hot_share > 0 and args.gsp_num_groups > 1:
        groups = [0 if rng.random() < args.gsp_hot_share else rng.randrange(1, args.gsp_num_groups) for _ in range(n)]
    else:
        groups = [g for g in range(args.gsp_num_groups) for _ in range(args.gsp_prompts_per_group)]
        rng.shuffle(groups)
    return [(systems[g] + "\n\nQuestion %d: " % i + words(args.gsp_question_len) + "?", g) for i, g in enumerate(groups)]


def one(url, model, prompt, args, headers, rec):
    body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": args.temperature}
    if args.ignore_eos:
        body["ignore_eos"] = True
    rec["t_send"] = time.perf_counter()
    rec["chunks"] = []
    try:
        conn, r = request(url, "POST", "/v1/completions", body, headers)
        rec["instance"] = r.getheader("x-weft-instance")
        if r.status != 200:
            rec["error"] = f"HTTP {r.status}: {r.read()[:200]!r}"
            conn.close()
            return
        usage = None
        buf = b""
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    rec["chunks"].append(time.perf_counter())
        conn.close()
        rec["t_done"] = time.perf_counter()
        rec["tokens"] = usage["completion_tokens"] if usage else len(rec["chunks"])
        rec["prompt_tokens"] = usage["prompt_tokens"] if usage else None
        details = (usage or {}).get("prompt_tokens_details") or {}
        rec["cached_tokens"] = details.get("cached_tokens")
    except (OSError, ValueError) as e:
        rec["error"] = repr(e)


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default=None, help="default: the first of /v1/models")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("-n", "--requests", type=int, default=32)
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("--rate", type=float, default=0, help="requests/s (Poisson arrivals) instead of a fixed concurrency")
    ap.add_argument("--prompt-tokens", type=int, default=110)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--plot", default=None, help="write a PNG plot here (needs matplotlib)")
    ap.add_argument("--shared-prefix", action="store_true", help="SGLang's generated-shared-prefix workload (--gsp-*)")
    ap.add_argument("--gsp-num-groups", type=int, default=64)
    ap.add_argument("--gsp-prompts-per-group", type=int, default=16)
    ap.add_argument("--gsp-system-prompt-len", type=int, default=2048)
    ap.add_argument("--gsp-question-len", type=int, default=128)
    ap.add_argument("--gsp-output-len", type=int, default=256)
    ap.add_argument("--gsp-hot-share", type=float, default=0, help="fraction of requests on group 0's prefix")
    args = ap.parse_args()
    if args.shared_prefix:
        args.max_tokens = args.gsp_output_len
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}

    model = args.model
    if model is None:
        conn, r = request(args.url, "GET", "/v1/models", headers=headers)
        model = json.loads(r.read())["data"][0]["id"]
        conn.close()
    if args.shared_prefix:
        pairs = make_shared_prefix(args.url, args, headers)
        prompts = [p for p, _ in pairs]
    else:
        prompts = make_prompts(args.url, args.requests, args.prompt_tokens, headers, args.seed)
    recs = [dict() for _ in prompts]
    sem = threading.Semaphore(args.concurrency if args.rate <= 0 else len(prompts))
    threads = []
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    due = t0
    for i, p in enumerate(prompts):
        if args.rate > 0 and i:
            # Poisson arrivals on an absolute schedule: starting a thread does not slow the rate
            due += rng.expovariate(args.rate)
            time.sleep(max(0.0, due - time.perf_counter()))
        sem.acquire()

        def run(i=i, p=p):
            try:
                one(args.url, model, p, args, headers, recs[i])
            finally:
                sem.release()
        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0

    ok = [r for r in recs if "error" not in r and r.get("chunks")]
    errors = [r["error"] for r in recs if "error" in r]
    ttft = [r["chunks"][0] - r["t_send"] for r in ok]
    itl = [b - a for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    lat = [r["t_done"] - r["t_send"] for r in ok]
    gen = sum(r["tokens"] for r in ok)
    ptoks = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens")]
    with_cache = [r for r in ok if r.get("cached_tokens") is not None]
    per_instance = {}
    for r in ok:
        d = per_instance.setdefault(r.get("instance") or "?", {"requests": 0, "prompt_tokens": 0, "uncached_tokens": 0})
        d["requests"] += 1
        d["prompt_tokens"] += r.get("prompt_tokens") or 0
        d["uncached_tokens"] += (r.get("prompt_tokens") or 0) - (r.get("cached_tokens") or 0)
    res = {
        "url": args.url, "model": model, "requests": len(prompts), "ok": len(ok), "errors": len(errors),
        "concurrency": args.concurrency if args.rate <= 0 else None, "rate": args.rate or None,
        "prompt_tokens_mean": statistics.mean(ptoks) if ptoks else None, "max_tokens": args.max_tokens,
        "wall_s": wall, "generated_tokens": gen, "gen_tokens_per_s": gen / wall,
        "requests_per_s": len(ok) / wall,
        "ttft_ms": {f"p{p}": 1e3 * pct(ttft, p) for p in (50, 90, 99)} | {"mean": 1e3 * statistics.mean(ttft) if ttft else None,
                                                                        "max": 1e3 * max(ttft) if ttft else None},
        "ttft_samples_ms": [1e3 * x for x in ttft],
        "itl_ms": {f"p{p}": 1e3 * pct(itl, p) for p in (50, 90, 99)} | {"mean": 1e3 * statistics.mean(itl) if itl else None,
                                                                      "max": 1e3 * max(itl) if itl else None},
        "latency_s": {f"p{p}": pct(lat, p) for p in (50, 90, 99)} | {"max": max(lat) if lat else None},
        "hit_rate": (sum(1 for r in with_cache if r["cached_tokens"] > 0) / len(with_cache)) if with_cache else None,
        "cached_token_share": (sum(r["cached_tokens"] for r in with_cache) /
                               max(1, sum(r["prompt_tokens"] or 0 for r in with_cache))) if with_cache else None,
        "per_instance": per_instance,
        "workload": ({"shared_prefix": True, "groups": args.gsp_num_groups, "prompts_per_group": args.gsp_prompts_per_group,
                      "system_prompt_len": args.gsp_system_prompt_len, "question_len": args.gsp_question_len,
                      "output_len": args.gsp_output_len, "hot_share": args.gsp_hot_share}
                     if args.shared_prefix else {"shared_prefix": False, "prompt_tokens": args.prompt_tokens}),
        "first_errors": errors[:5],
    }
    print(f"{res['ok']}/{res['requests']} requests ok in {wall:.1f} s against {args.url} ({model}); "
          f"prompts ~{res['prompt_tokens_mean'] or args.prompt_tokens:.0f} tokens, {args.max_tokens} new; "
          + (f"concurrency {args.concurrency}" if args.rate <= 0 else f"rate {args.rate}/s"))
    print(f"aggregate generation: {res['gen_tokens_per_s']:.1f} tokens/s, {res['requests_per_s']:.2f} requests/s")
    if res["hit_rate"] is not None:
        print(f"prefix hits: {res['hit_rate']:.1%} of requests, {res['cached_token_share']:.1%} of prompt tokens cached")
    if len(per_instance) > 1 or "?" not in per_instance:
        print("per instance: " + ", ".join(f"{k} {v['requests']} req / {v['uncached_tokens']} prefill tok"
                                           for k, v in sorted(per_instance.items())))
    print("| metric        |      P50 |      P90 |      P99 |      max |")
    print("|---------------|----------|----------|----------|----------|")
    for name, d in (("TTFT ms", res["ttft_ms"]), ("ITL ms", res["itl_ms"]), ("latency s", res["latency_s"])):
        print(f"| {name:<13} | {d['p50']:8.2f} | {d['p90']:8.2f} | {d['p99']:8.2f} | {d['max'] or 0:8.2f} |")
    if res["ttft_ms"]["mean"] is not None:
        print(f"TTFT mean {res['ttft_ms']['mean']:.1f} ms, ITL mean {res['itl_ms']['mean']:.2f} ms")
    if errors:
        print(f"{len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("loadgen: matplotlib is not installed (pip install matplotlib); no plot", file=sys.stderr)
        else:
            fig, ax = plt.subplots(1, 3, figsize=(15, 4))
            ax[0].hist([1e3 * x for x in ttft], bins=30)
            ax[0].set_title("time to first token (ms)")
            ax[1].hist([1e3 * x for x in itl], bins=50)
            ax[1].set_title("inter-token latency (ms)")
            times = sorted(t - t0 for r in ok for t in r["chunks"])
            ax[2].plot(times, range(1, len(times) + 1))
            ax[2].set_title(f"tokens received over time ({res['gen_tokens_per_s']:.0f} tok/s)")
            ax[2].set_xlabel("s")
            fig.suptitle(f"{model} @ {args.url}: {len(ok)} requests, "
                         + (f"concurrency {args.concurrency}" if args.rate <= 0 else f"rate {args.rate}/s"))
            fig.tight_layout()
            fig.savefig(args.plot, dpi=100)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
