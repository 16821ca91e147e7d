"""The autoscaling contract of deploy/k8s, against a real Prometheus.

The exact PromQL of the KEDA ScaledObject (overlays/cpu-only) and of the HPA's
external metrics (overlays/hpa: the prometheus-adapter rules expanded with
the HPA's selector) are read from the rendered manifests, with their
thresholds and target types. A local fleet stands in for the cluster: two
real `weft serve` instances (-t 1, pinned to cores 0 and 1) started with the
weft-cpu Deployment's own serve arguments (its --device-class and --max-seqs;
less what only means something in a cluster: host, port, model path,
threads, Redis), and the router with the router Deployment's arguments (its
--hold-empty-s; less its DNS discovery, host and port). Prometheus (Debian's
package, started here on loopback) scrapes the router as the manifests'
ServiceMonitor says (its interval, timeout, path, honorLabels).

A bounded closed-loop client steps the load 0.5x -> 2x -> 0.5x the fleet's
capacity (its concurrent slots: instances x --max-seqs). Every scrape
interval the queries are evaluated through Prometheus' HTTP API and a table
is printed: each query's value, its threshold, and the replicas the HPA
formula wants from it (AverageValue: ceil(value / threshold); Value:
ceil(current * value / threshold); no value = KEDA's 0), and the largest.

The contract: a query that reacts to load crosses its threshold (wants more
replicas than the 2 running) within its rate window + one scrape interval +
slack of the overload starting, and is back (wants no more than 2) within the
same bound of the load returning to 0.5x, where the slack is one query period
+ 2 s, plus, on the way back, the time the overload's tail (the requests it
left queued, waiting and running) took to end, as measured by the client.
The refusals query stays empty: under this load the router queues, it
refuses nothing.
"""
import http.client
import json
import math
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest

from conftest import SANITIZED, Router, Server
from test_deploy import (arg, container, duration_s, find, hpa_signals, instance_deployments, keda_signals,
                         need_tools, rate_windows, render)

KEDA_OVERLAY, HPA_OVERLAY, CLASS = "cpu-only", "hpa", "cpu"
N_INSTANCES = 2
# serve/router arguments that only mean something in the cluster (and why they are left out here)
SERVE_DROP = {"--host": "loopback", "--port": "a free port", "-m": "the local model file",
              "-t": "one thread per instance here (pinned)", "--kv-remote": "no Redis needed for this"}
ROUTER_DROP = {"--host": "loopback", "--port": "a free port", "-m": "the local model file",
               "--instances-dns": "the local instances are named with --instance"}
HARD_CAP_S = 240  # the client stops by itself past this, whatever happens


class Signal:
    """One query with its target: the triggers/metrics that use it, by name."""

    def __init__(self, query, mtype, threshold):
        self.query, self.type, self.threshold = query, mtype, threshold
        self.names = []
        ws = rate_windows(query)
        self.window = max(ws) if ws else 0
        self.silent = "weft_router_desired_extra_instances" in query  # refusals: none under a queued load

    def desired(self, value, current):
        if value is None or math.isnan(value):
            return 0  # KEDA's ignoreNullValues (and the HPA: no metric, no opinion)
        if self.type == "AverageValue":
            return math.ceil(value / self.threshold)
        return math.ceil(current * value / self.threshold)


def split_args(args, drop):
    """Container args -> (kept, dropped) as flag/value pairs (every weft flag here takes a value)."""
    a = [str(x) for x in args]
    kept, dropped = [], []
    i = 0
    while i < len(a):
        if a[i].startswith("-") and i + 1 < len(a) and not a[i + 1].startswith("--"):
            pair = a[i:i + 2]
            i += 2
        else:
            pair = a[i:i + 1]
            i += 1
        (dropped if pair[0] in drop else kept).append(pair)
    return [x for p in kept for x in p], dropped


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Prometheus:
    def __init__(self, binary, router_port, endpoint, tmp):
        self.scrape_s = duration_s(endpoint["interval"])
        cfg = {"global": {"scrape_interval": endpoint["interval"], "evaluation_interval": endpoint["interval"]},
               "scrape_configs": [{
                   "job_name": "weft-router",
                   "scrape_interval": endpoint["interval"],
                   "scrape_timeout": endpoint.get("scrapeTimeout", endpoint["interval"]),
                   "metrics_path": endpoint.get("path", "/metrics"),
                   "scheme": endpoint.get("scheme", "http"),
                   "honor_labels": bool(endpoint.get("honorLabels", False)),
                   "static_configs": [{"targets": [f"127.0.0.1:{router_port}"]}]}]}
        path = os.path.join(tmp, "prometheus.yml")
        with open(path, "w") as f:
            json.dump(cfg, f)  # JSON is YAML
        self.port = free_port()
        self.log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.proc = subprocess.Popen([binary, f"--config.file={path}", f"--storage.tsdb.path={tmp}/data",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
                                      "--storage.tsdb.retention.time=1h"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.log.seek(0)
        raise AssertionError("prometheus did not start:\n" + self.log.read()[-3000:])

    def query(self, q):
        """An instant query: its single value, or None when it has no series."""
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        data = body["data"]
        if data["resultType"] == "scalar":
            return float(data["result"][1])
        res = data["result"]
        assert len(res) <= 1, f"KEDA and the HPA want one element; {q} gave {len(res)}"
        return float(res[0]["value"][1]) if res else None

    def target_up(self):
        with urllib.request.urlopen(self.base + "/api/v1/targets", timeout=10) as r:
            ts = json.load(r)["data"]["activeTargets"]
        return ts and all(t["health"] == "up" for t in ts)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


class ClosedLoop:
    """n threads; thread i keeps one streamed request in flight while i < active."""

    def __init__(self, port, n, max_tokens):
        self.port, self.max_tokens = port, max_tokens
        self.active = 0
        self.stop = threading.Event()
        self.deadline = time.monotonic() + HARD_CAP_S
        self.done = []  # (thread, t_send, t_first, t_end, status)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, i):
        k = 0
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            if i >= self.active:
                time.sleep(0.02)
                continue
            rec = self.one(i, k)
            with self.lock:
                self.done.append(rec)
            k += 1

    def one(self, i, k):
        t0 = time.monotonic()
        t_first, status = None, None
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            body = {"prompt": f"Client {i}, story {k}: once upon a time there was", "max_tokens": self.max_tokens,
                    "temperature": 0, "ignore_eos": True, "stream": True}
            c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            status = r.status
            buf = b""
            while True:
                d = r.read1(65536)
                if not d:
                    break
                if t_first is None:
                    buf += d
                    if b"data: {" in buf:
                        t_first = time.monotonic()
            c.close()
        except OSError as e:
            status = repr(e)
        return (i, t0, t_first, time.monotonic(), status)

    def close(self):
        self.active = 0
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def decode_rate(inst, max_tokens=32):
    """One streamed request straight to an instance (warms it up): its decode tokens/s."""
    c = http.client.HTTPConnection("127.0.0.1", inst.port, timeout=120)
    body = {"prompt": "Warm up: once upon a time", "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True}
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    times, buf = [], b""
    while True:
        d = r.read1(65536)
        if not d:
            break
        buf += d
        n = buf.count(b"data: {")
        times += [time.monotonic()] * (n - len(times))
    c.close()
    assert len(times) >= max_tokens // 2, buf[-300:]
    return (len(times) - 1) / max(times[-1] - times[0], 1e-3)


@pytest.fixture(scope="module")
def manifests():
    if SANITIZED:
        pytest.skip("the sanitizers' run: this measures timing against Prometheus, not memory safety")
    need_tools()
    keda, hpa = render(KEDA_OVERLAY), render(HPA_OVERLAY)
    signals = {}
    so = find(keda, "ScaledObject", "weft-" + CLASS)
    for name, q, t, th, _ in keda_signals(so):
        signals.setdefault((q, t, th), Signal(q, t, th)).names.append("keda:" + name)
    for name, q, t, th in hpa_signals(hpa, find(hpa, "HorizontalPodAutoscaler", "weft-" + CLASS)):
        signals.setdefault((q, t, th), Signal(q, t, th)).names.append("hpa:" + name)
    deploy = next(d for d in instance_deployments(keda) if d["metadata"]["name"] == "weft-" + CLASS)
    serve_args, serve_dropped = split_args(container(deploy)["args"][1:], SERVE_DROP)
    router = container(find(keda, "Deployment", "weft-router"))
    router_args, router_dropped = split_args(router["args"][1:], ROUTER_DROP)
    endpoint = find(keda, "ServiceMonitor", "weft-router")["spec"]["endpoints"][0]
    return dict(signals=list(signals.values()), serve_args=serve_args, serve_dropped=serve_dropped,
                router_args=router_args, router_dropped=router_dropped, endpoint=endpoint,
                max_seqs=int(arg(container(deploy), "--max-seqs")), device_class=arg(container(deploy), "--device-class"),
                max_replicas=so["spec"]["maxReplicaCount"])


def prometheus_binary():
    p = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)
    if not p:
        pytest.skip("prometheus is not installed (scripts/install-deploy-deps.sh: apt-get install prometheus)")
    return p


def test_autoscaling_contract(manifests):
    m = manifests
    binary = prometheus_binary()
    signals = m["signals"]
    print(f"\nfrom the manifests ({KEDA_OVERLAY}, {HPA_OVERLAY}):")
    for s in signals:
        print(f"  {' '.join(s.names)}: {s.type} {s.threshold:g}, window {s.window:g} s\n    {s.query}")
    print(f"  weft serve {' '.join(m['serve_args'])}   (left out: "
          + "; ".join(f"{p[0]}: {SERVE_DROP[p[0]]}" for p in m["serve_dropped"]) + ")")
    print(f"  weft router {' '.join(m['router_args'])}   (left out: "
          + "; ".join(f"{p[0]}: {ROUTER_DROP[p[0]]}" for p in m["router_dropped"]) + ")")
    assert m["device_class"] == CLASS and any(f'device_class="{CLASS}"' in s.query for s in signals)
    reacting = [s for s in signals if not s.silent]
    assert len(reacting) >= 3 and len(signals) > len(reacting)

    t_start = time.monotonic()
    insts, router, prom, client = [], None, None, None
    tmp = tempfile.mkdtemp(prefix="weft-autoscale-")
    try:
        insts = [Server(*m["serve_args"], threads=1, cpu=k) for k in range(N_INSTANCES)]
        router = Router(insts, *m["router_args"])
        router.wait_ready(n_up=N_INSTANCES)
        # size the requests so that a request waiting for a slot waits past the TTFT SLO:
        # 1.5x the SLO of decoding alone (batched decoding is no faster per sequence, and at 2x a
        # request waits about one request time for a slot)
        slo = next(s.threshold for s in signals if "weft_router_ttft_seconds" in s.query)
        rate = min(decode_rate(i) for i in insts)
        max_tokens = max(16, min(256, math.ceil(1.5 * slo * rate)))
        capacity = N_INSTANCES * m["max_seqs"]
        low, high = capacity // 2, 2 * capacity
        # the first requests through the router are slower (connections, first batches): sent
        # before Prometheus' first scrape, so that no rate() window counts them
        warm = ClosedLoop(router.port, low, 8)
        warm.active = low
        deadline = time.time() + 120
        while len(warm.done) < 2 * low and time.time() < deadline:
            time.sleep(0.05)
        warm.close()
        assert len(warm.done) >= 2 * low and {d[4] for d in warm.done} == {200}, warm.done
        prom = Prometheus(binary, router.port, m["endpoint"], tmp)
        S = prom.scrape_s
        slack = S + 2
        print(f"  capacity {capacity} slots ({N_INSTANCES} x --max-seqs {m['max_seqs']}); 0.5x = {low}, "
              f"2x = {high} clients; decode {rate:.1f} tok/s alone -> max_tokens {max_tokens}; "
              f"router scraped every {S:g} s (the ServiceMonitor's interval), queried every {S:g} s")
        deadline = time.time() + 30
        while not prom.target_up():
            assert time.time() < deadline, "prometheus does not scrape the router"
            time.sleep(0.5)

        client = ClosedLoop(router.port, high, max_tokens)
        rows, phases = [], {}
        print("\n  columns: each query's value -> the replicas it wants (current: %d)" % N_INSTANCES)
        for k, sg in enumerate(signals):
            print(f"    q{k + 1} = {'/'.join(sg.names)} ({sg.type}, threshold {sg.threshold:g})")
        print(f"{'t':>6} {'phase':>5} {'cl':>3}" + "".join(f" | {'q%d' % (k + 1):>14}" for k in range(len(signals)))
              + " | want")

        def sample(phase):
            t = time.monotonic()
            vals = [prom.query(s.query) for s in signals]
            want = [s.desired(v, N_INSTANCES) for s, v in zip(signals, vals)]
            rows.append((t, phase, client.active, vals, want))
            cells = "".join(f" | {('-' if v is None else format(v, '.3g')):>8} -> {w:>2}" for v, w in zip(vals, want))
            print(f"{t - t_start:6.1f} {phase:>5} {client.active:>3}{cells} | {max(want)}", flush=True)
            return want

        def run_phase(name, active, min_s, max_s, done):
            client.active = active
            t0 = phases[name] = time.monotonic()
            nxt = t0
            while True:
                nxt += S
                time.sleep(max(0, nxt - time.monotonic()))
                sample(name)
                el = time.monotonic() - t0
                if el >= max_s or (el >= min_s and done(t0)):
                    return

        def crossed(s, i, t0):
            return [r for r in rows if r[0] >= t0 and r[4][i] > N_INSTANCES]

        # 0.5x: the baseline (the TTFT window holds a few scrapes of it)
        run_phase("0.5x", low, max(20, 4 * S), max(20, 4 * S), lambda t0: True)
        # 2x until every reacting query has crossed and stayed two more samples (at most its bound)
        rise = {id(s): s.window + S + slack for s in reacting}
        idx = {id(s): signals.index(s) for s in signals}

        def all_crossed(t0):
            return all(len(crossed(s, idx[id(s)], t0)) >= 3 for s in reacting)
        run_phase("2x", high, 2 * S, max(rise.values()) + 2 * S, all_crossed)

        # back to 0.5x until every one is back (the bound is known once the tail is served)
        def all_back(t0):
            last = [r for r in rows if r[0] >= t0][-2:]
            return len(last) == 2 and all(r[4][idx[id(s)]] <= N_INSTANCES for r in last for s in reacting)
        run_phase("0.5x'", low, 2 * S, max(s.window for s in reacting) + 3 * S + slack + 60, all_back)
        client.close()

        t_high, t_low2 = phases["2x"], phases["0.5x'"]
        # the overload's tail: the requests sent during it (and later ones that waited behind them
        # past the SLO) are still queued, waiting and running after the offered load dropped; the
        # signals can only follow once they are served
        tail = [d for d in client.done if d[2] is not None and (d[1] < t_low2 or d[2] - d[1] > slo)]
        drain = max([0] + [d[3] - t_low2 for d in tail])
        first = max([0] + [d[2] - t_low2 for d in tail])
        statuses = {d[4] for d in client.done}
        served = sum(1 for d in client.done if d[4] == 200)
        print(f"\n{served} requests answered ({len(client.done)} in all, statuses {sorted(map(str, statuses))}); "
              f"the overload's tail got its last first token {first:.1f} s and ended {drain:.1f} s into the 0.5x' phase")
        assert statuses == {200}, statuses
        bounds = [(name, t0) for name, t0 in phases.items()] + [("end", time.monotonic())]
        for (name, t0), (_, t1) in zip(bounds, bounds[1:]):
            tt = sorted(d[2] - d[1] for d in client.done if t0 <= d[1] < t1 and d[2] is not None)
            if tt:
                print(f"  {name:>5}: {len(tt)} requests sent, client-side TTFT p50 {tt[len(tt) // 2]:.2f} s, "
                      f"max {tt[-1]:.2f} s")

        failures = []
        base_rows = [r for r in rows if r[1] == "0.5x"]
        for s in reacting:
            i = idx[id(s)]
            label = "/".join(s.names)
            if base_rows[-1][4][i] > N_INSTANCES:
                failures.append(f"{label}: wants {base_rows[-1][4][i]} replicas at 0.5x before the overload")
            up = [r for r in rows if r[0] >= t_high and r[4][i] > N_INSTANCES]
            bound_up = s.window + S + slack
            if not up:
                failures.append(f"{label}: never crossed its threshold during the 2x phase")
                continue
            t_up = up[0][0] - t_high
            after = [r for r in rows if r[0] >= t_low2]
            back = next((k for k in range(len(after)) if all(r[4][i] <= N_INSTANCES for r in after[k:])), None)
            bound_down = s.window + S + slack + drain
            t_down = after[back][0] - t_low2 if back is not None else None
            print(f"  {label}: crossed {t_up:.1f} s after the overload began (bound {bound_up:.1f} s = window "
                  f"{s.window:g} + scrape {S:g} + slack {slack:g}); back "
                  + (f"{t_down:.1f} s" if t_down is not None else "never")
                  + f" after it ended (bound {bound_down:.1f} s = window {s.window:g} + scrape {S:g} + slack "
                  f"{slack:g} + tail {drain:.1f})")
            if t_up > bound_up:
                failures.append(f"{label}: crossed after {t_up:.1f} s > {bound_up:.1f} s")
            if t_down is None or t_down > bound_down:
                failures.append(f"{label}: not back within {bound_down:.1f} s of the load returning to 0.5x")
        want_max = [max(r[4]) for r in rows]
        high_max = max(w for r, w in zip(rows, want_max) if r[1] == "2x")
        print(f"  desired replicas (the largest over the queries, HPA rule): {want_max[len(base_rows) - 1]} at "
              f"0.5x, up to {high_max} at 2x (maxReplicaCount caps it at {m['max_replicas']}), {want_max[-1]} at the "
                  f"end; {N_INSTANCES} running")
        if not high_max > N_INSTANCES:
            failures.append("the desired replicas never rose above the current during the overload")
        if want_max[-1] > N_INSTANCES:
            failures.append("the desired replicas did not come back")
        # the silent ones: no refusals, so no value (KEDA: 0, no opinion) all along
        _, text = router.get("/metrics")
        refused = sum(float(v) for v in re.findall(r"^weft_router_scale_out_signals_total\{[^}]*\} (\S+)$", text, re.M))
        for s in signals:
            if s.silent:
                vals = [r[3][idx[id(s)]] for r in rows]
                print(f"  {'/'.join(s.names)}: {refused:g} refusals counted by the router; values seen: "
                      f"{sorted({('-' if v is None else v) for v in vals}, key=str)}")
                if refused == 0 and any(v is not None for v in vals):
                    failures.append(f"{'/'.join(s.names)}: has a value with no refusal")
        print(f"  wall time {time.monotonic() - t_start:.1f} s")
        assert not failures, "\n".join(failures)
    finally:
        if client:
            client.close()
        if prom:
            prom.stop()
        if router:
            router.stop()
        for i in insts:
            i.stop()
        shutil.rmtree(tmp, ignore_errors=True)
