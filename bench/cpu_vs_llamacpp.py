#!/usr/bin/env python3
"""weft's CPU backend against llama.cpp's, side by side on the same GGUF files.

For each model and thread count, rounds of `weft bench` and llama.cpp's
`llama-bench` run interleaved (weft, llama.cpp, weft, ...) with the same
arguments (-p PP -n TG -r REPS -t N), one thread pinned to one core; the table
gives the median over rounds of each run's median, and for token generation the
share of the machine's measured read bandwidth (`weft bench --membw`) that the
model's weight bytes per token (as weft bench counts them) make at that rate.

llama.cpp is not part of weft: build its CPU tools from its public source,
outside this repository, e.g. for an AVX2 machine without AVX-512
    cmake -S llama.cpp -B build-avx2 -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
          -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAMA_CURL=OFF
    cmake --build build-avx2 --target llama-bench -j
and pass --llama-bench build-avx2/bin/llama-bench.

Models (made once, cached in ~/.cache/weft/bench):
  135m   SmolLM2-135M-Instruct: the default model is Q4_1; the other types come
         from `weft quantize` of it (as llama-quantize --pure)
  1.7b   a SmolLM2-1.7B-shape random-weight model (`weft gen`: 2048 wide, 24
         layers, 32 heads, ff 8192, SmolLM2's vocabulary), memory-bound

  bench/cpu_vs_llamacpp.py --llama-bench PATH [--models 135m,1.7b]
      [--types Q4_0,Q4_1,Q8_0,Q4_K] [--threads 1,2] [--rounds 2] [-r 3]
      [-p 512] [-n 64] [--isa avx2] [--out FILE]
--isa forces weft's kernel table (cpu.isa; the llama.cpp build decides its own
ISA). --out also writes the table (markdown) to FILE.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("WEFT_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "weft")
DEFAULT = os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SHAPE_17B = ["--embd", "2048", "--layers", "24", "--heads", "32", "--kv-heads", "32", "--ff", "8192", "--tied"]


def run(cmd, env=None, pin=None):
    if pin is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(pin)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p.stdout


def model_path(weft, name, typ):
    os.makedirs(os.path.join(CACHE, "bench"), exist_ok=True)
    if not os.path.exists(DEFAULT):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-model.sh")], check=True)
    if name == "135m":
        if typ == "Q4_1":
            return DEFAULT
        out = os.path.join(CACHE, "bench", "smollm2-135m-%s.gguf" % typ)
        if not os.path.exists(out):
            run([weft, "quantize", DEFAULT, out + ".part", typ])
            os.rename(out + ".part", out)
        return out
    out = os.path.join(CACHE, "bench", "smollm2-1.7b-shape-%s.gguf" % typ)
    if not os.path.exists(out):
        run([weft, "gen", "-o", out + ".part", "--type", typ, "--vocab-from", DEFAULT] + SHAPE_17B)
        os.rename(out + ".part", out)
    return out


def weft_bench(weft, env, model, a, t):
    out = run([weft, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.r), "-t", str(t), "--json"],
              env=env, pin=0 if t == 1 else None)
    j = json.loads(out.strip().splitlines()[-1])
    res = {r["test"]: r["tps_median"] for r in j["results"]}
    return res["pp%d" % a.p], res["tg%d" % a.n], j["weight_bytes_per_token"], j.get("device", "")


def llama_bench(lb, model, a, t):
    out = run([lb, "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.r), "-t", str(t), "-o", "json"],
              pin=0 if t == 1 else None)
    pp = tg = None
    for e in json.loads(out):
        ts = statistics.median(e["samples_ts"]) if e.get("samples_ts") else e["avg_ts"]
        if e["n_prompt"] == a.p and e["n_gen"] == 0:
            pp = ts
        elif e["n_gen"] == a.n and e["n_prompt"] == 0:
            tg = ts
    return pp, tg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--weft", default=os.environ.get("WEFT_BIN", os.path.join(ROOT, "build", "weft")))
    ap.add_argument("--models", default="135m,1.7b")
    ap.add_argument("--types", default="Q4_0,Q4_1,Q8_0,Q4_K")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--isa", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    env = dict(os.environ)
    if a.isa:
        env["WEFT_CPU_ISA"] = a.isa
    threads = [int(x) for x in a.threads.split(",")]
    bw = {}
    for t in threads:
        j = json.loads(run([a.weft, "bench", "--membw", "-t", str(t), "--json"], pin=0 if t == 1 else None)
                       .strip().splitlines()[-1])
        bw[t] = j["membw_gbs"]
    lines = ["| model | type | threads | weft pp%d | llama.cpp pp%d | weft tg%d | llama.cpp tg%d | weft tg of membw | llama.cpp tg of membw |"
             % (a.p, a.p, a.n, a.n), "|---|---|---|---|---|---|---|---|---|"]
    device = ""
    for name in a.models.split(","):
        for typ in a.types.split(","):
            model = model_path(a.weft, name, typ)
            for t in threads:
                w_pp, w_tg, l_pp, l_tg = [], [], [], []
                for _ in range(a.rounds):
                    pp, tg, bpt, device = weft_bench(a.weft, env, model, a, t)
                    w_pp.append(pp)
                    w_tg.append(tg)
                    pp, tg = llama_bench(a.llama_bench, model, a, t)
                    l_pp.append(pp)
                    l_tg.append(tg)
                med = statistics.median
                share = lambda tg: "%.0f%%" % (100 * bpt * tg / (bw[t] * 1e9))
                row = "| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %s |" % (
                    name, typ, t, med(w_pp), med(l_pp), med(w_tg), med(l_tg), share(med(w_tg)), share(med(l_tg)))
                lines.append(row)
                print(row + "   rounds weft pp %s tg %s, llama.cpp pp %s tg %s" % (
                    [round(x, 1) for x in w_pp], [round(x, 1) for x in w_tg], [round(x, 1) for x in l_pp],
                    [round(x, 1) for x in l_tg]), flush=True)
    head = ["weft device: %s; measured read bandwidth %s" % (
        device, ", ".join("%.1f GB/s at %d thread%s" % (bw[t], t, "" if t == 1 else "s") for t in threads)),
        "args: -p %d -n %d -r %d, %d interleaved rounds (median of the rounds' medians); 1 thread pinned to core 0"
        % (a.p, a.n, a.r, a.rounds), ""]
    print("\n".join(head + lines))
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
