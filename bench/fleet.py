#!/usr/bin/env python3
"""A local weft fleet, each routing policy on the same workload, one table.

Scenarios (FLEET.md, "How to measure it here"; the issue's figures):
  real-shared   two real instances (-t 1, pinned to a core each), SGLang's
                generated-shared-prefix workload sized to 60-80 % of the
                fleet's KV (--kv-mib keeps it small): hit rate, throughput
                and TTFT against round-robin
  real-unique   the same fleet, all-unique prompts: weft vs least-load
  mock-speeds   four mocks at prefill speeds 4:2:1:1, unique prompts, a
                closed loop of 24 clients: prefill tokens routed in
                proportion, throughput vs least-load
  mock-speeds-burst  the same, all 240 requests at once (a batch job): the
                split is made before any answer comes back
  mock-hot      four equal mocks, one prefix carrying 80 % of the traffic:
                max/min instance load and hit rate
  mock-latency  zero-latency mocks at 200 requests/s: the router's added
                latency (its own histogram, arrival to dispatch)

Each run starts fresh instances (empty caches) and a fresh router; the
policies take turns within a run (round-robin, least-load, weft, then the
next run), so machine noise lands on all of them alike. Figures are
medians over --runs. Writes bench-out/fleet-*.json and a plot when
matplotlib is there.

  bench/fleet.sh real-shared --runs 3
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLICIES = ("round-robin", "least-load", "weft")
LOGDIR = None  # set from --out: each process's stderr is kept there


def default_model():
    if os.environ.get("WEFT_MODEL"):
        return os.environ["WEFT_MODEL"]
    cache = os.environ.get("WEFT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "weft")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


class Proc:
    def __init__(self, args, what):
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.port = None
        deadline = time.time() + 120
        log = []
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.p.kill()
            raise RuntimeError(f"{what} did not start: {''.join(log)}")
        # the rest of stderr goes to LOGDIR/<what>-<port>.log (the first lines too)
        import threading
        path = os.path.join(LOGDIR, f"{what.replace(' ', '-')}-{self.port}.log") if LOGDIR else os.devnull
        f = open(path, "w")
        f.writelines(log)

        def drain():
            for line in self.p.stderr:
                f.write(line)
            f.close()
        threading.Thread(target=drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()


def get(url, path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return r.read().decode()


def wait_ready(router, n):
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            m = get(router.url, "/metrics")
            up = sum(float(v) for v in re.findall(r"^weft_router_instance_up\{[^}]*\} (\S+)$", m, re.M))
            if up >= n:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("router not ready")


def hist_quantile(metrics, name, q):
    """Quantile of a Prometheus histogram, linear within a bucket."""
    b = [(float("inf") if le == "+Inf" else float(le), float(v))
         for le, v in re.findall(r'^%s_bucket\{[^}]*le="([^"]+)"\} (\S+)$' % name, metrics, re.M)]
    if not b or b[-1][1] == 0:
        return float("nan")
    target = q * b[-1][1]
    lo_le, lo_n = 0.0, 0.0
    for le, n in b:
        if n >= target:
            if le == float("inf"):
                return lo_le
            return lo_le + (le - lo_le) * ((target - lo_n) / (n - lo_n) if n > lo_n else 0)
        lo_le, lo_n = le, n
    return lo_le


def start_instances(args, spec):
    procs = []
    for i, s in enumerate(spec):
        cmd = [args.weft, "serve", "-m", args.model, "--port", "0", "--max-conns-per-client", "4096"]
        if s.get("mock"):
            cmd += ["--mock", s["mock"]] + s.get("extra", [])
        else:
            cmd = ["taskset", "-c", str(s["cpu"])] + cmd + ["-t", "1"] + s.get("extra", [])
        procs.append(Proc(cmd, "weft serve"))
    return procs


def loadgen(args, url, lg_args, out):
    cmd = [sys.executable, os.path.join(HERE, "loadgen.py"), "--url", url, "--json", out] + lg_args
    subprocess.run(cmd, stdout=subprocess.DEVNULL if not args.verbose else None, check=False)
    with open(out) as f:
        return json.load(f)


SCENARIOS = {
    # 5 x 600-token prefixes (38 blocks each, 190 in all) over two instances of 136 KV blocks
    # (--kv-mib 48; -c 2048 so that the one-full-context floor does not raise it): 70 % of the
    # fleet's KV, more than one instance holds
    "real-shared": dict(
        instances=[{"cpu": 0, "extra": ["--kv-mib", "48", "-c", "2048"]},
                   {"cpu": 1, "extra": ["--kv-mib", "48", "-c", "2048"]}],
        loadgen=["--shared-prefix", "--gsp-num-groups", "5", "--gsp-prompts-per-group", "16",
                 "--gsp-system-prompt-len", "600", "--gsp-question-len", "32", "--gsp-output-len", "16", "-c", "6"],
        policies=POLICIES),
    "real-unique": dict(
        instances=[{"cpu": 0, "extra": ["--kv-mib", "48", "-c", "2048"]},
                   {"cpu": 1, "extra": ["--kv-mib", "48", "-c", "2048"]}],
        loadgen=["-n", "48", "--prompt-tokens", "200", "--max-tokens", "16", "--ignore-eos", "-c", "6"],
        policies=("least-load", "weft")),
    "mock-speeds": dict(
        instances=[{"mock": "prefill=%d,decode=%d,vendor=v%d" % (p, p // 40, i)}
                   for i, p in enumerate((16000, 8000, 4000, 4000))],
        loadgen=["-n", "240", "--prompt-tokens", "1000", "--max-tokens", "4", "--ignore-eos", "-c", "24"],
        policies=("least-load", "weft")),
    # the same fleet and prompts, all 240 requests at once (a batch job): no completion
    # feeds back before the split is made, so the split is the routing policy's alone
    "mock-speeds-burst": dict(
        instances=[{"mock": "prefill=%d,decode=%d,vendor=v%d" % (p, p // 40, i)}
                   for i, p in enumerate((16000, 8000, 4000, 4000))],
        loadgen=["-n", "240", "--prompt-tokens", "1000", "--max-tokens", "4", "--ignore-eos", "-c", "240"],
        policies=("least-load", "weft")),
    "mock-hot": dict(
        instances=[{"mock": "prefill=8000,decode=200"} for _ in range(4)],
        loadgen=["--shared-prefix", "--gsp-num-groups", "8", "--gsp-prompts-per-group", "40",
                 "--gsp-system-prompt-len", "2000", "--gsp-question-len", "64", "--gsp-output-len", "8",
                 "--gsp-hot-share", "0.8", "-c", "16"],
        policies=("least-load", "weft")),
    "mock-latency": dict(
        instances=[{"mock": "prefill=1000000000,decode=1000000000"} for _ in range(4)],
        loadgen=["-n", "2000", "--rate", "200", "--prompt-tokens", "64", "--max-tokens", "2", "--ignore-eos"],
        policies=("weft",)),
}


def run_scenario(args, name):
    sc = SCENARIOS[name]
    pols = [p for p in sc["policies"] if not args.policies or p in args.policies.split(",")]
    rows = {p: [] for p in pols}
    for run in range(args.runs):
        for pol in pols:
            insts = start_instances(args, sc["instances"])
            router = Proc([args.weft, "router", "-m", args.model, "--port", "0", "--policy", pol, "--poll-ms", "100"] +
                          sum((["--instance", i.url] for i in insts), []), "weft router")
            try:
                wait_ready(router, len(insts))
                out = os.path.join(args.out, f"fleet-{name}-{pol}-{run}.json")
                res = loadgen(args, router.url, sc["loadgen"] + ["--seed", str(run + 1)], out)
                m = get(router.url, "/metrics")
                res["instances"] = [i.url[len("http://"):] for i in insts]
                res["router_overhead_ms"] = {f"p{q}": 1e3 * hist_quantile(m, "weft_router_overhead_seconds", q / 100)
                                             for q in (50, 90, 99)}
                with open(out, "w") as f:
                    json.dump(res, f, indent=2)
                rows[pol].append(res)
                print(f"  {name} run {run + 1} {pol}: {res['requests_per_s']:.2f} req/s, TTFT p50 "
                      f"{res['ttft_ms']['p50']:.0f} ms, hit {res['hit_rate'] or 0:.0%}, errors {res['errors']}",
                      flush=True)
            finally:
                router.stop()
                for i in insts:
                    i.stop()
    return rows


def med(rows, f):
    v = [f(r) for r in rows]
    v = [x for x in v if x is not None and x == x]
    return statistics.median(v) if v else float("nan")


def shares(r, key):
    """Each instance's share of key, in the scenario's instance order."""
    pi = r["per_instance"]
    tot = sum(d[key] for d in pi.values()) or 1
    return [pi.get(k, {key: 0})[key] / tot for k in r["instances"]]


def report(name, rows):
    print(f"\n{name}: medians of {len(next(iter(rows.values())))} runs")
    print("| policy      | req/s  | gen tok/s | TTFT p50 ms | p90 ms  | p99 ms  | ITL p99 ms | hit   | share (requests)")
    print("|-------------|--------|-----------|-------------|---------|---------|------------|-------|-----------------")
    for pol, rs in rows.items():
        share = "/".join(f"{x:.2f}" for x in [statistics.median(s) for s in zip(*[shares(r, "requests") for r in rs])])
        print(f"| {pol:<11} | {med(rs, lambda r: r['requests_per_s']):6.2f} | {med(rs, lambda r: r['gen_tokens_per_s']):9.1f} "
              f"| {med(rs, lambda r: r['ttft_ms']['p50']):11.1f} | {med(rs, lambda r: r['ttft_ms']['p90']):7.1f} "
              f"| {med(rs, lambda r: r['ttft_ms']['p99']):7.1f} | {med(rs, lambda r: r['itl_ms']['p99']):10.1f} "
              f"| {med(rs, lambda r: r['hit_rate']) if rs[0]['hit_rate'] is not None else float('nan'):5.1%} | {share}")
    w = rows.get("weft")
    if not w or any(p not in rows for p in SCENARIOS[name]["policies"]):
        return
    if name == "real-shared":
        rr = rows["round-robin"]
        print(f"  weft vs round-robin: throughput {med(w, lambda r: r['requests_per_s']) / med(rr, lambda r: r['requests_per_s']):.2f}x "
              f"(target >= 2), TTFT p50 {med(w, lambda r: r['ttft_ms']['p50']) / med(rr, lambda r: r['ttft_ms']['p50']):.2f} "
              f"of round-robin's (target <= 0.2), hit {med(w, lambda r: r['hit_rate']):.1%} (target >= 80 %)")
    if name in ("real-unique", "mock-speeds", "mock-speeds-burst", "mock-hot"):
        ll = rows["least-load"]
        print(f"  weft vs least-load: throughput {med(w, lambda r: r['requests_per_s']) / med(ll, lambda r: r['requests_per_s']):.2f}x, "
              f"TTFT p50 {med(w, lambda r: r['ttft_ms']['p50']):.0f} vs {med(ll, lambda r: r['ttft_ms']['p50']):.0f} ms")
    if name in ("mock-speeds", "mock-speeds-burst"):
        s = [statistics.median(x) for x in zip(*[shares(r, "uncached_tokens") for r in w])]
        want = [4 / 8, 2 / 8, 1 / 8, 1 / 8]
        print("  weft's prefill-token shares " + "/".join(f"{x:.3f}" for x in s) + " vs speed shares 0.500/0.250/0.125/0.125: "
              + ", ".join(f"{(a / b - 1) * 100:+.0f} %" for a, b in zip(s, want)) + " (target within 10 %)")
    if name == "mock-hot":
        def imbalance(r, key):  # per run: which instance ends up hot differs from run to run
            s = shares(r, key)
            return max(s) / min(s) if min(s) > 0 else float("inf")
        for pol, rs in rows.items():
            print(f"  {pol}: max/min instance load per run (median) {med(rs, lambda r: imbalance(r, 'requests')):.2f} "
                  f"in requests, {med(rs, lambda r: imbalance(r, 'uncached_tokens')):.2f} in prefill tokens "
                  f"(target <= 1.5), hit {med(rs, lambda r: r['hit_rate']):.1%} (target >= 70 %)")
    if name == "mock-latency":
        print(f"  router-added latency (arrival to dispatch): p50 {med(w, lambda r: r['router_overhead_ms']['p50']):.3f} ms "
              f"(target <= 1), p99 {med(w, lambda r: r['router_overhead_ms']['p99']):.3f} ms (target <= 5), "
              f"at {med(w, lambda r: r['requests_per_s']):.0f} requests/s")


def plot(all_rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fleet: matplotlib is not installed; no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(2, len(all_rows), figsize=(4 * len(all_rows), 7), squeeze=False)
    for j, (name, rows) in enumerate(all_rows.items()):
        pols = list(rows)
        ax[0][j].bar(pols, [med(rows[p], lambda r: r["requests_per_s"]) for p in pols])
        ax[0][j].set_title(f"{name}: requests/s")
        ax[1][j].bar(pols, [med(rows[p], lambda r: r["ttft_ms"]["p50"]) for p in pols])
        ax[1][j].set_title("TTFT p50 (ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--weft", default=os.environ.get("WEFT_BIN", os.path.join(ROOT, "build", "weft")))
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-out"))
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--policies", default=None, help="comma-separated subset of each scenario's policies")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    global LOGDIR
    LOGDIR = os.path.join(args.out, "logs")
    os.makedirs(LOGDIR, exist_ok=True)
    all_rows = {}
    for name in args.scenarios:
        if name not in SCENARIOS:
            ap.error(f"unknown scenario {name}; have {', '.join(SCENARIOS)}")
        all_rows[name] = run_scenario(args, name)
    for name, rows in all_rows.items():
        report(name, rows)
    plot(all_rows, os.path.join(args.out, "fleet.png"))


if __name__ == "__main__":
    main()
