#!/usr/bin/env python3
"""Failure detection and migration time through `weft router`.

Three real instances (pinned with taskset, -t 1) behind a router; S greedy
streams of T tokens; once every stream has some tokens, the instance holding
the most is killed (-9) or hung (SIGSTOP). Per run it reports:
  detect_ms   kill -> the router's circuit for that instance reads open (polled on /metrics)
  gap_ms      kill -> the next token on each moved stream (detection + the continuation's prefill
              of prompt + tokens so far on another instance), median and max over the moved streams
  normal_ms   the median gap between tokens on the same streams before the kill
and checks every stream ended with [DONE] and its text equals an unmoved run.
Medians over --runs. Usage: bench/failover.py [--runs 3] [--poll-ms 100] [--streams 9] [--tokens 96]
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fleet  # noqa: E402  (Proc, get, wait_ready, default_model)


class Stream(threading.Thread):
    def __init__(self, port, body):
        super().__init__(daemon=True)
        self.port, self.body = port, body
        self.times, self.pieces, self.done, self.error, self.instance = [], [], False, None, None
        self.head = threading.Event()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            c.request("POST", "/v1/chat/completions", json.dumps(self.body), {"Content-Type": "application/json"})
            r = c.getresponse()
            self.instance = r.getheader("x-weft-instance")
            self.head.set()
            buf = b""
            while True:
                d = r.read1(65536)
                if not d:
                    break
                buf += d
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    line = ev.decode()
                    if line == "data: [DONE]":
                        self.done = True
                    elif line.startswith("data: "):
                        j = json.loads(line[6:])
                        if "error" in j:
                            self.error = j["error"]
                        for ch in j.get("choices", []):
                            if ch["delta"].get("content"):
                                self.pieces.append(ch["delta"]["content"])
                                self.times.append(time.monotonic())
        except Exception as e:  # noqa: BLE001
            self.error = repr(e)
        finally:
            self.head.set()


def bodies(n, tokens):
    topics = ["rivers", "volcanoes", "bridges", "owls", "glaciers", "clocks", "tea", "comets", "maps", "bees",
              "ships", "deserts"]
    return [{"messages": [{"role": "user", "content": f"Tell me about {topics[i % len(topics)]} ({i})."}],
             "max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": True} for i in range(n)]


def run_once(args, how):
    insts = [fleet.Proc(["taskset", "-c", str(i % 2), args.weft, "serve", "-m", args.model, "--port", "0", "-t", "1",
                         "--no-calibrate"], "weft serve") for i in range(3)]
    router = fleet.Proc([args.weft, "router", "-m", args.model, "--port", "0", "--poll-ms", str(args.poll_ms)]
                        + sum([["--instance", p.url] for p in insts], []), "weft router")
    try:
        fleet.wait_ready(router, 3)
        bs = bodies(args.streams, args.tokens)
        refs = [Stream(insts[0].port, b) for b in bs]
        for s in refs:
            s.start()
        for s in refs:
            s.join()
        ss = [Stream(router.port, b) for b in bs]
        for s in ss:
            s.start()
        for s in ss:
            s.head.wait(120)
        by = {}
        for s in ss:
            by.setdefault(s.instance, []).append(s)
        vname = max(by, key=lambda k: len(by[k]))
        victim = next(p for p in insts if vname.endswith(":%d" % p.port))
        held = by[vname]
        while not all(len(s.pieces) >= 8 or not s.is_alive() for s in ss):
            time.sleep(0.005)
        before = [len(s.times) for s in held]
        t_kill = time.monotonic()
        if how == "kill":
            victim.p.kill()
        else:
            os.kill(victim.p.pid, signal.SIGSTOP)
        detect = None
        while detect is None and time.monotonic() - t_kill < 60:
            m = fleet.get(router.url, "/metrics")
            if re.search(r'^weft_router_circuit_state\{instance="%s"\} 2$' % re.escape(vname), m, re.M):
                detect = time.monotonic() - t_kill
            else:
                time.sleep(0.002)
        for s in ss:
            s.join()
        gaps, normal = [], []
        for s, k in zip(held, before):
            if k < len(s.times):
                gaps.append(s.times[k] - t_kill)
            normal += [b - a for a, b in zip(s.times[:k - 1], s.times[1:k])]
        ok = all(s.done and not s.error and "".join(s.pieces) == "".join(r.pieces) for s, r in zip(ss, refs))
        if how != "kill":
            os.kill(victim.p.pid, signal.SIGCONT)
        return {"detect_ms": (detect or float("nan")) * 1e3, "gap_med_ms": statistics.median(gaps) * 1e3,
                "gap_max_ms": max(gaps) * 1e3, "normal_ms": statistics.median(normal) * 1e3, "moved": len(gaps),
                "exact": ok}
    finally:
        router.stop()
        for p in insts:
            if p.p.poll() is None:
                p.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", default=os.path.join(os.path.dirname(HERE), "build", "weft"))
    ap.add_argument("--model", default=fleet.default_model())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--poll-ms", type=int, default=100)
    ap.add_argument("--streams", type=int, default=9)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    for how in ("kill", "stop"):
        rows = [run_once(args, how) for _ in range(args.runs)]
        for r in rows:
            print(how, json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}))
        med = {k: statistics.median(r[k] for r in rows) for k in ("detect_ms", "gap_med_ms", "gap_max_ms", "normal_ms")}
        print(f"{how:5s} median of {args.runs}: detect {med['detect_ms']:.0f} ms, next token on a moved stream "
              f"{med['gap_med_ms']:.0f} ms (max {med['gap_max_ms']:.0f}), normal gap {med['normal_ms']:.0f} ms, "
              f"moved {sum(r['moved'] for r in rows)} streams, all exact: {all(r['exact'] for r in rows)}")


if __name__ == "__main__":
    main()
