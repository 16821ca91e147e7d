#!/usr/bin/env python3
"""How `weft serve` keeps answering GET /health while it is attacked on loopback.

Each phase starts its own server (`BIN serve -m MODEL --port 0 -t 1 ...`, pinned
with taskset to the first CPU this process may use; the bench's own threads go to
the others), runs for --seconds, then stops the server with SIGTERM (SIGKILL if it
has not exited 10 s later, which is reported). Meanwhile a probe sends
GET /health every --interval-ms (20) and the server's VmRSS is sampled every 10 ms.

  baseline       nothing else happens.
  pipelining     one attacker keeps a connection open and sends
                 `GET /metrics HTTP/1.1` requests pipelined, --pipeline-depth (64)
                 per send, as fast as the socket takes them, and never reads;
                 at most --pipeline-max-mib (64) MiB in all, and resets the
                 connection at the phase end. Stopped early (and
                 reported) if the server's RSS grows by more than --rss-limit-mib.
  slow-tokenize  the server runs with -c --ctx (32768; if refused, the largest of
                 16384/8192/4096/2048 accepted, reported); --tok-clients (8) clients
                 each loop: POST /v1/completions with a ~--prompt-kib (100) KiB
                 passage of varied English words (checked with POST /tokenize to
                 stay below the context) and max_tokens 1, wait up to --tok-wait
                 (0.1) s for the answer, then drop the connection (the server
                 aborts the request) and send the next. A 20k-token prefill on one
                 thread takes minutes, so without the drop each client would send
                 one request per phase. On a 2-core VM, 0.1 s (~80 prompts/s)
                 is more than a server that tokenizes on its event loop can parse
                 and tokenize (~40/s), so its /health waits grow over the phase;
                 --tok-wait 0.25 (~33/s) is below that and shows the bursts alone
                 (8 prompts back to back, ~200 ms).

The probe is open-loop: each GET /health goes out at its scheduled time
(t0 + k*interval) on its own connection (or an idle keep-alive one with
--probe-keepalive) whether or not the earlier ones were answered, so a stall of
S seconds shows as S/interval slow probes (no coordinated omission); latency is
from the send (connect included) to the end of the answer. `lag` is how late the
bench itself sent (p99): it should stay at a few ms.
Figures: p50/p99/max in ms over the successful probes, n probes, errors. With
--runs R each phase runs R times (the phases interleaved) and the table shows the
median of the per-run p50 and p99, the max over runs and the total n.

  python3 bench/serve_attack.py [--bin build/weft] [--model GGUF] [--seconds 8]
      [--runs 1] [--phases baseline,pipelining,slow-tokenize] [--json OUT]

Only 127.0.0.1 is ever contacted. Every loop is bounded in count and time.
"""
import argparse
import asyncio
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"
PHASES = ("baseline", "pipelining", "slow-tokenize")


def default_model():
    if os.environ.get("WEFT_MODEL"):
        return os.environ["WEFT_MODEL"]
    cache = os.environ.get("WEFT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "weft")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def now():
    return time.perf_counter()


def log(msg):
    print(msg, flush=True)


# ---- the server ----

class Server:
    """`weft serve` on a free loopback port; stderr is drained by a thread."""

    def __init__(self, binary, model, extra, threads, cpu, start_timeout=120):
        self.args = [binary, "serve", "-m", model, "--port", "0", "-t", str(threads), *extra]
        cmd = (["taskset", "-c", str(cpu)] if cpu is not None else []) + self.args
        # taskset execs the server, so the pid is the server's
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.log = []
        self.port = None
        self.ctx = None
        self.killed = False
        self.rc = None
        started = threading.Event()

        def reader():
            for line in self.proc.stderr:
                if len(self.log) < 10000:
                    self.log.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+) \(model .*, context (\d+)", line)
                if m and self.port is None:
                    self.port, self.ctx = int(m.group(1)), int(m.group(2))
                    started.set()
            started.set()

        self.reader = threading.Thread(target=reader, daemon=True)
        self.reader.start()
        started.wait(start_timeout)
        if self.port is None:
            self.kill()
            raise RuntimeError("weft serve did not start (%s):\n%s" % (" ".join(cmd), "".join(self.log[-20:])))

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout` s; returns (rc, seconds, killed)."""
        t = now()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        self.rc = self.proc.returncode
        return self.rc, now() - t, self.killed


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class RssSampler(threading.Thread):
    """VmRSS every `period` s until stopped (at most `max_s` s); `on_limit` is
    called once when it has grown by more than limit_kib over the first sample."""

    def __init__(self, pid, period=0.01, max_s=3600, limit_kib=None, on_limit=None):
        super().__init__(daemon=True)
        self.pid, self.period, self.max_s = pid, period, max_s
        self.limit_kib, self.on_limit = limit_kib, on_limit
        self.start_kib = rss_kib(pid)
        self.peak_kib = self.start_kib or 0
        self.end_kib = self.start_kib
        self.hit_limit = False
        self.halt = threading.Event()

    def run(self):
        t_end = now() + self.max_s
        while not self.halt.is_set() and now() < t_end:
            v = rss_kib(self.pid)
            if v is None:
                break
            self.end_kib = v
            self.peak_kib = max(self.peak_kib, v)
            if (self.limit_kib and self.start_kib and not self.hit_limit and
                    v - self.start_kib > self.limit_kib):
                self.hit_limit = True
                if self.on_limit:
                    self.on_limit()
            self.halt.wait(self.period)


# ---- HTTP on raw sockets (the bench controls every byte and every timeout) ----

class HttpError(Exception):
    pass


def connect(port, timeout):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def close_rst(s):
    """Close at once with a reset (no FIN handshake, no lingering unsent data)."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def read_response(s, deadline, max_bytes=64 << 20):
    """One HTTP/1.1 response from blocking socket s by `deadline` (perf_counter
    time): (status, body, server_closes). Raises socket.timeout / HttpError."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        left = deadline - now()
        if left <= 0:
            raise socket.timeout("response headers")
        s.settimeout(left)
        d = s.recv(65536)
        if not d:
            raise HttpError("connection closed before the response")
        buf += d
        if len(buf) > max_bytes:
            raise HttpError("response headers too long")
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise HttpError("bad status line %r" % lines[0][:80])
    status = int(parts[1])
    hdr = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdr[k.strip().lower()] = v.strip()
    closes = hdr.get("connection", "").lower() == "close"
    if "content-length" in hdr:
        n = int(hdr["content-length"])
        while len(body) < n:
            left = deadline - now()
            if left <= 0:
                raise socket.timeout("response body")
            s.settimeout(left)
            d = s.recv(min(65536, n - len(body)))
            if not d:
                raise HttpError("connection closed in the body")
            body += d
        return status, body[:n], closes
    if "chunked" in hdr.get("transfer-encoding", "").lower():
        while not body.endswith(b"0\r\n\r\n"):
            left = deadline - now()
            if left <= 0:
                raise socket.timeout("chunked body")
            s.settimeout(left)
            d = s.recv(65536)
            if not d:
                break
            body += d
            if len(body) > max_bytes:
                raise HttpError("body too long")
        return status, body, closes
    while len(body) < max_bytes:  # no length: until the server closes
        left = deadline - now()
        if left <= 0:
            raise socket.timeout("body to EOF")
        s.settimeout(left)
        d = s.recv(65536)
        if not d:
            break
        body += d
    return status, body, True


def request(port, method, path, body=None, timeout=60.0):
    """One request on a fresh connection: (status, body bytes, seconds)."""
    t = now()
    s = connect(port, timeout)
    try:
        data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        head = "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (method, path, HOST)
        if body is not None:
            head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
        s.settimeout(timeout)
        s.sendall(head.encode() + b"\r\n" + data)
        status, rb, _ = read_response(s, t + timeout)
        return status, rb, now() - t
    finally:
        s.close()


def post_json(port, path, body, timeout=60.0):
    status, rb, dt = request(port, "POST", path, body, timeout)
    try:
        return status, json.loads(rb), dt
    except ValueError:
        return status, {"raw": rb[:200].decode("latin-1")}, dt


# ---- the probe ----

async def _probe_one(port, sched, timeout, pool, keepalive, req, out):
    sent = time.perf_counter()
    ok = False
    conn = pool.pop() if pool else None
    try:
        async def go(conn):
            if conn is None:
                conn = await asyncio.open_connection(HOST, port)
            r, w = conn
            w.write(req)
            head = await r.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            hdr = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hdr[k.strip().lower()] = v.strip()
            if "content-length" in hdr:
                await r.readexactly(int(hdr["content-length"]))
            else:
                await r.read(1 << 20)
            return conn, status, hdr.get("connection", "").lower() == "close"
        conn, status, closes = await asyncio.wait_for(go(conn), timeout)
        ok = status == 200
        if keepalive and not closes:
            pool.append(conn)
        else:
            conn[1].close()
        conn = None
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
            ValueError, IndexError):
        pass
    finally:
        if conn is not None:
            conn[1].close()
    out.append((sched, sent, time.perf_counter(), ok))


def probe(port, t0, t_end, interval, keepalive, timeout, out):
    """GET /health scheduled at t0 + k*interval for t0 + k*interval < t_end, each
    sent at its time whether or not earlier ones were answered (open loop: one
    connection per probe, or an idle one from a keep-alive pool). Appends
    (scheduled, sent, done, ok) to out; returns once all are answered or timed out."""
    req = ("GET /health HTTP/1.1\r\nHost: %s\r\n%s\r\n" %
           (HOST, "" if keepalive else "Connection: close\r\n")).encode()

    async def main():
        pool, tasks = [], []
        max_n = int((t_end - t0) / interval) + 1
        for k in range(max_n):
            sched = t0 + k * interval
            if sched >= t_end:
                break
            w = sched - time.perf_counter()
            if w > 0:
                await asyncio.sleep(w)
            tasks.append(asyncio.ensure_future(_probe_one(port, sched, timeout, pool, keepalive, req, out)))
        if tasks:
            await asyncio.wait(tasks, timeout=timeout + 5)
        for c in pool:
            c[1].close()
        await asyncio.sleep(0)

    asyncio.run(main())


def pct(xs, q):
    """Nearest-rank percentile of a sorted list."""
    if not xs:
        return None
    i = max(0, min(len(xs) - 1, int(-(-q * len(xs) // 100)) - 1))
    return xs[i]


def summarize(samples):
    lat = sorted((d - se) * 1e3 for _, se, d, ok in samples if ok)
    lag = sorted((se - sc) * 1e3 for sc, se, _, _ in samples)
    return {"n": len(samples), "errors": sum(1 for x in samples if not x[3]),
            "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": lat[-1] if lat else None,
            "send_lag_p99_ms": pct(lag, 99), "send_lag_max_ms": lag[-1] if lag else None}


# ---- attackers ----

def pipeliner(port, t_end, depth, max_bytes, halt, st):
    """One connection, pipelined GET /metrics, never read. Non-blocking sends,
    so the thread ends on time however full the socket is."""
    chunk = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * depth
    st.update(sent_bytes=0, sends=0, blocked_s=0.0, error=None)
    try:
        s = connect(port, 5.0)
    except OSError as e:
        st["error"] = "connect: %s" % e
        return
    st["sock"] = s
    s.setblocking(False)
    off = 0
    sent = 0
    max_sends = max_bytes // 1 + 1  # a send moves at least one byte
    for _ in range(max_sends):
        if halt.is_set() or now() >= t_end or sent >= max_bytes:
            break
        try:
            n = s.send(chunk[off:off + (max_bytes - sent)])
            sent += n
            off = (off + n) % len(chunk)
            st["sends"] += 1
        except (BlockingIOError, InterruptedError):
            t = now()
            select.select([], [s], [], max(0.0, min(0.05, t_end - t)))
            st["blocked_s"] += now() - t
        except OSError as e:
            st["error"] = "send: %s" % e
            break
    st["sent_bytes"] = sent
    st.pop("sock", None)
    close_rst(s)  # the attack ends with the phase


WORDS = """
the of and to in is was that for on with as by at from his her their this which or had be not are
but have one all were when there can an your what so out about who them than then would into up
more some could time very first only its my over such make like him long little water been call
people word now find day made may part way sound number great three most world place year after
thought back give most every good before through much where line right too mean old any same tell
boy follow came want show also around form small set put end does another well large must big even
because turn here why ask went men read need land different home us move try kind hand picture
again change off play spell air away animal house point page letter mother answer found study still
learn should america england plant cover food sun four between state keep eye never last let tree
city cross farm hard start might story saw far sea draw left late run while press close night real
life few north open seem together next white children begin got walk example ease paper group always
music those both mark often until mile river car feet care second book carry took science eat room
friend began idea fish mountain stop once base hear horse cut sure watch color face wood main enough
plain girl usual young ready above ever red list though feel talk bird soon body dog family direct
pose leave song measure door product black short numeral class wind question happen complete ship
area half rock order fire south problem piece told knew pass since top whole king space heard best
hour better true during hundred five remember step early hold west ground interest reach fast verb
sing listen six table travel less morning ten simple several vowel toward war lay against pattern
slow center love person money serve appear road map rain rule govern pull cold notice voice unit
power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest
correct able pound done beauty drive stood contain front teach week final gave green quick develop
ocean warm free minute strong special mind behind clear tail produce fact street inch multiply nothing
course stay wheel full force blue object decide surface deep moon island foot system busy test record
boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate hot
miss brought heat snow tire bring yes distant fill east paint language among grand ball yet wave drop
heart present heavy dance engine position arm wide sail material size vary settle speak weight general
ice matter circle pair include divide syllable felt perhaps pick sudden count square reason length
represent art subject region energy hunt probable bed brother egg ride cell believe fraction forest
sit race window store summer train sleep prove lone exercise wall catch mount wish sky board joy
winter sat written wild instrument kept glass grass cow job edge sign visit past soft fun bright gas
weather month million bear finish happy hope flower clothe strange gone jump baby eight village meet
root buy raise solve metal whether push seven paragraph third shall held hair describe cook floor
either result burn hill safe cat century consider type law bit coast copy phrase silent tall sand
soil roll temperature finger industry value fight lie beat excite natural view sense ear else quite
broke case middle kill son lake moment scale loud spring observe child straight consonant nation
dictionary milk speed method organ pay age section dress cloud surprise quiet stone tiny climb cool
design poor lot experiment bottom key iron single stick flat twenty skin smile crease hole trade
melody trip office receive row mouth exact symbol die least trouble shout except wrote seed tone
join suggest clean break lady yard rise bad blow oil blood touch grew cent mix team wire cost lost
brown wear garden equal sent choose fell fit flow fair bank collect save control decimal gentle
woman captain practice separate difficult doctor please protect noon whose locate ring character
insect caught period indicate radio spoke atom human history effect electric expect crop modern
element hit student corner party supply bone rail imagine provide agree thus capital chair danger
fruit rich thick soldier process operate guess necessary sharp wing create neighbor wash bat rather
crowd corn compare poem string bell depend meat rub tube famous dollar stream fear sight thin
triangle planet hurry chief colony clock mine tie enter major fresh search send yellow gun allow
print dead spot desert suit current lift rose continue block chart hat sell success company subtract
event particular deal swim term opposite wife shoe shoulder spread arrange camp invent cotton born
determine quart nine truck noise level chance gather shop stretch throw shine property column
molecule select wrong gray repeat require broad prepare salt nose plural anger claim continent
oxygen sugar death pretty skill women season solution magnet silver thank branch match suffix
especially fig afraid huge sister steel discuss forward similar guide experience score apple bought
led pitch coat mass card band rope slip win dream evening condition feed tool total basic smell
valley nor double seat arrive master track parent shore division sheet substance favor connect post
spend chord fat glad original share station dad bread charge proper bar offer segment slave duck
instant market degree populate chick dear enemy reply drink occur support speech nature range steam
motion path liquid log meant quotient teeth shell neck
""".split()


def make_passage(n_chars, seed=20240601):
    """A deterministic passage of varied English words, about n_chars long."""
    rng = random.Random(seed)
    out, n = [], 0
    for _ in range(n_chars):  # bounded: each sentence adds at least a few chars
        if n >= n_chars:
            break
        k = rng.randint(6, 18)
        ws = [rng.choice(WORDS) for _ in range(k)]
        if rng.random() < 0.15:
            ws.insert(rng.randint(0, k), str(rng.randint(2, 1999)))
        if rng.random() < 0.3:
            ws[rng.randint(0, k - 1)] += ","
        ws[0] = ws[0].capitalize()
        sent = " ".join(ws) + rng.choice([".", ".", ".", "?", "!", ";"])
        out.append(sent)
        n += len(sent) + 1
        if rng.random() < 0.08:
            out.append("\n\n")
            n += 2
    return " ".join(out)[:n_chars]


def prepare_prompt(port, ctx, target_chars, log_fn):
    """The passage, cut until POST /tokenize counts fewer than ctx - 8 tokens;
    returns (text, tokens, tokenize ms unloaded: median of 3)."""
    text = make_passage(target_chars)
    count = None
    for _ in range(8):
        status, j, _ = post_json(port, "/tokenize", {"prompt": text}, timeout=120)
        if status != 200:
            raise RuntimeError("POST /tokenize answered %d: %s" % (status, j))
        count = j["count"]
        if count < ctx - 8:
            break
        text = text[:int(len(text) * (ctx - 64) / count * 0.97)]
    else:
        raise RuntimeError("cannot fit the passage into a context of %d" % ctx)
    times = []
    for _ in range(3):
        _, _, dt = post_json(port, "/tokenize", {"prompt": text}, timeout=120)
        times.append(dt * 1e3)
    ms = statistics.median(times)
    log_fn("slow-tokenize: prompt %d bytes, %d tokens (context %d), POST /tokenize %.1f ms unloaded"
           % (len(text.encode()), count, ctx, ms))
    if ms < 10:
        log_fn("slow-tokenize: note: tokenizing the prompt takes under 10 ms")
    return text, count, ms


def tok_client(port, t_end, payload, wait_s, halt, st, lock, max_requests=100000):
    """Loop: POST the completion, wait up to wait_s for the answer, drop it."""
    head = ("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (HOST, len(payload))).encode()
    data = head + payload
    for _ in range(max_requests):
        if halt.is_set() or now() >= t_end:
            break
        s = None
        key = "abandoned"
        try:
            s = connect(port, max(0.1, t_end - now()))
            with lock:
                st["socks"].add(s)
            s.settimeout(max(0.1, t_end - now()))
            s.sendall(data)
            status, _, _ = read_response(s, min(now() + wait_s, t_end), max_bytes=1 << 20)
            key = "ok" if status == 200 else "status_%d" % status
        except socket.timeout:
            key = "abandoned"
        except (OSError, HttpError, ValueError):
            key = "errors"
        finally:
            if s is not None:
                with lock:
                    st["socks"].discard(s)
                close_rst(s)
        with lock:
            st[key] = st.get(key, 0) + 1
            st["sent"] += 1


# ---- phases ----

class Bench:
    def __init__(self, a):
        self.a = a
        avail = sorted(os.sched_getaffinity(0))
        self.server_cpu = None
        self.client_cpus = None
        if a.no_pin:
            self.pin_note = "not pinned (--no-pin)"
        elif not shutil.which("taskset"):
            self.pin_note = "not pinned (no taskset)"
        elif len(avail) < 2:
            self.server_cpu = avail[0]
            self.pin_note = "server on CPU %d; only one CPU, clients share it" % avail[0]
        else:
            self.server_cpu = avail[0]
            self.client_cpus = set(avail[1:])
            self.pin_note = "server on CPU %d (taskset), clients on CPU %s" % (
                avail[0], ",".join(map(str, avail[1:])))
        if self.client_cpus:
            os.sched_setaffinity(0, self.client_cpus)
        self.prompt = None
        self.ctx_note = None
        self.kills = 0

    def start(self, extra):
        return Server(self.a.bin, self.a.model, extra, self.a.threads, self.server_cpu)

    def start_ctx(self):
        """A server with -c a.ctx, or the largest smaller power of two accepted."""
        want = self.a.ctx
        tried = []
        for c in [want] + [x for x in (16384, 8192, 4096, 2048) if x < want]:
            try:
                srv = self.start(["-c", str(c)])
            except RuntimeError as e:
                tried.append("%d refused (%s)" % (c, str(e).strip().splitlines()[-1][:120]))
                continue
            if srv.ctx != want:
                note = "asked for -c %d, serving a context of %d" % (want, srv.ctx)
                if tried:
                    note += "; " + "; ".join(tried)
                if note != self.ctx_note:
                    log("slow-tokenize: " + note)
                self.ctx_note = note
            return srv
        raise RuntimeError("no context accepted: " + "; ".join(tried))

    def stop(self, srv):
        rc, dt, killed = srv.stop(10.0)
        if killed:
            self.kills += 1
            log("  server did not exit within 10 s of SIGTERM: killed with SIGKILL")
        elif rc != 0:
            log("  server exited with %s after SIGTERM" % rc)
        return {"rc": rc, "stop_s": round(dt, 3), "killed": killed}

    def run_phase(self, phase):
        a = self.a
        srv = self.start_ctx() if phase == "slow-tokenize" else self.start([])
        info = {"server_pid": srv.pid, "context": srv.ctx}
        try:
            st, _, _ = request(srv.port, "GET", "/health", timeout=10)  # warm: first answer
            if st != 200:
                raise RuntimeError("/health answered %d before the phase" % st)
            payload = None
            if phase == "slow-tokenize":
                if self.prompt is None or self.prompt[3] != srv.ctx:
                    text, count, ms = prepare_prompt(srv.port, srv.ctx, a.prompt_kib * 1024, log)
                    self.prompt = (text, count, ms, srv.ctx)
                text, count, ms, _ = self.prompt
                payload = json.dumps({"prompt": text, "max_tokens": 1}).encode()
                info.update(prompt_bytes=len(text.encode()), prompt_tokens=count, tokenize_ms=round(ms, 2))
            halt = threading.Event()
            limit = a.rss_limit_mib * 1024 if phase == "pipelining" else None
            rss = RssSampler(srv.pid, limit_kib=limit, on_limit=halt.set, max_s=a.seconds + 60)
            t0 = now() + 0.05
            t_end = t0 + a.seconds
            samples = []
            threads = [threading.Thread(target=probe, daemon=True, args=(
                srv.port, t0, t_end, a.interval_ms / 1e3, a.probe_keepalive, a.probe_timeout, samples))]
            att = {}
            lock = threading.Lock()
            if phase == "pipelining":
                threads.append(threading.Thread(target=pipeliner, daemon=True, args=(
                    srv.port, t_end, a.pipeline_depth, a.pipeline_max_mib << 20, halt, att)))
            elif phase == "slow-tokenize":
                att.update(sent=0, socks=set())
                for _ in range(a.tok_clients):
                    threads.append(threading.Thread(target=tok_client, daemon=True, args=(
                        srv.port, t_end, payload, a.tok_wait, halt, att, lock)))
            rss.start()
            for t in threads:
                t.start()
            for t in threads:
                t.join(a.seconds + a.probe_timeout + 30)
            alive = [t for t in threads if t.is_alive()]
            halt.set()
            rss.halt.set()
            rss.join(5)
            # drop the attackers' connections before stopping the server
            if "sock" in att:
                close_rst(att.pop("sock"))
            for s in list(att.pop("socks", ())):
                close_rst(s)
            if alive:
                log("  warning: %d client threads still running at the phase end" % len(alive))
            res = summarize(samples)
            res.update(info)
            res["rss_start_mib"] = round((rss.start_kib or 0) / 1024, 1)
            res["rss_peak_mib"] = round(rss.peak_kib / 1024, 1)
            res["rss_end_mib"] = round((rss.end_kib or 0) / 1024, 1)
            if phase == "pipelining":
                res["rss_limit_hit"] = rss.hit_limit
                res["attack_sent_mib"] = round(att.get("sent_bytes", 0) / 2**20, 2)
                res["attack_requests"] = att.get("sent_bytes", 0) // len(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                res["attack_blocked_s"] = round(att.get("blocked_s", 0.0), 2)
                if att.get("error"):
                    res["attack_error"] = att["error"]
            elif phase == "slow-tokenize":
                res["attack"] = {k: v for k, v in att.items() if k != "socks"}
            res["server_alive_at_end"] = srv.alive()
        finally:
            res_stop = self.stop(srv)
        res.update(res_stop)
        return res


def fmt(x, w=8):
    return ("%*.1f" % (w, x)) if x is not None else " " * (w - 1) + "-"


def describe(phase, r):
    s = "p50 %s  p99 %s  max %s ms  n %d  errors %d  (lag p99 %s)" % (
        fmt(r["p50_ms"], 7), fmt(r["p99_ms"], 7), fmt(r["max_ms"], 7), r["n"], r["errors"],
        fmt(r["send_lag_p99_ms"], 0).strip())
    extra = ["RSS %.1f -> peak %.1f MiB" % (r["rss_start_mib"], r["rss_peak_mib"])]
    if phase == "pipelining":
        extra.append("sent %.2f MiB (%d requests)%s" % (r["attack_sent_mib"], r["attack_requests"],
                                                        ", stopped at --rss-limit-mib" if r["rss_limit_hit"] else ""))
        if r.get("attack_error"):
            extra.append(r["attack_error"])
    elif phase == "slow-tokenize":
        at = r["attack"]
        extra.append("%d completions sent: %s" % (at.get("sent", 0), ", ".join(
            "%s %d" % (k, v) for k, v in sorted(at.items()) if k != "sent")))
    if r["killed"]:
        extra.append("SIGKILLed after SIGTERM")
    return s + "\n      " + "; ".join(extra)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.environ.get("WEFT_BIN", os.path.join(ROOT, "build", "weft")))
    p.add_argument("--model", default=default_model())
    p.add_argument("--seconds", type=float, default=8.0, help="length of each phase (default 8)")
    p.add_argument("--runs", type=int, default=1, help="repeat each phase R times (default 1)")
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--threads", type=int, default=1, help="server -t (default 1)")
    p.add_argument("--interval-ms", type=float, default=20.0, help="probe period (default 20)")
    p.add_argument("--probe-keepalive", action="store_true", help="probe on one keep-alive connection "
                   "(default: a fresh connection per probe)")
    p.add_argument("--probe-timeout", type=float, default=30.0)
    p.add_argument("--pipeline-depth", type=int, default=64)
    p.add_argument("--pipeline-max-mib", type=int, default=64)
    p.add_argument("--rss-limit-mib", type=int, default=6144,
                   help="stop the pipelining attacker once the server grew by this much (default 6144)")
    p.add_argument("--ctx", type=int, default=32768, help="server -c in slow-tokenize (default 32768)")
    p.add_argument("--tok-clients", type=int, default=8)
    p.add_argument("--prompt-kib", type=int, default=100)
    p.add_argument("--tok-wait", type=float, default=0.1,
                   help="s a slow-tokenize client waits for its answer before dropping it (default 0.1)")
    p.add_argument("--no-pin", action="store_true", help="no taskset / CPU affinity")
    a = p.parse_args()
    phases = [x.strip() for x in a.phases.split(",") if x.strip()]
    bad = [x for x in phases if x not in PHASES]
    if bad or not phases:
        p.error("--phases: unknown %s (choose from %s)" % (",".join(bad), ",".join(PHASES)))
    if not (0 < a.seconds <= 600) or not (1 <= a.runs <= 100) or not (1 <= a.interval_ms <= 10000):
        p.error("--seconds in (0, 600], --runs in [1, 100], --interval-ms in [1, 10000]")
    if not (1 <= a.tok_clients <= 64) or not (1 <= a.pipeline_depth <= 100000) or a.pipeline_max_mib < 1:
        p.error("--tok-clients in [1, 64], --pipeline-depth in [1, 100000], --pipeline-max-mib >= 1")
    if not os.access(a.bin, os.X_OK):
        sys.exit("serve_attack: %s is not built" % a.bin)
    if not os.path.exists(a.model):
        sys.exit("serve_attack: no model %s (bash scripts/fetch-model.sh)" % a.model)
    sys.setswitchinterval(0.001)

    b = Bench(a)
    print("weft serve under attack: %s, model %s" % (a.bin, os.path.basename(a.model)))
    print("server -t %d; %s; probe GET /health every %g ms on %s connection%s; %g s per phase, %d run%s"
          % (a.threads, b.pin_note, a.interval_ms, "reused keep-alive" if a.probe_keepalive else "a fresh",
             "s" if a.probe_keepalive else " each", a.seconds, a.runs, "" if a.runs == 1 else "s"))
    print("probes open-loop; /health latency in ms from send to answer; lag = how late the bench sent")
    sys.stdout.flush()
    results = {ph: [] for ph in phases}
    for run in range(a.runs):
        for ph in phases:
            r = b.run_phase(ph)
            results[ph].append(r)
            print("  %-13s run %d/%d: %s" % (ph, run + 1, a.runs, describe(ph, r)))
            sys.stdout.flush()

    print()
    if b.ctx_note:
        print("slow-tokenize: " + b.ctx_note)
    if "slow-tokenize" in results:
        r0 = results["slow-tokenize"][0]
        print("slow-tokenize: %d clients, prompt %d bytes = %d tokens (context %d), "
              "tokenized in %.1f ms unloaded, max_tokens 1, answer awaited up to %g s"
              % (a.tok_clients, r0["prompt_bytes"], r0["prompt_tokens"], r0["context"], r0["tokenize_ms"],
                 a.tok_wait))
    if "pipelining" in results:
        print("pipelining: %d requests per send, at most %d MiB, never read" % (a.pipeline_depth, a.pipeline_max_mib))
    med = "median of %d runs" % a.runs if a.runs > 1 else "1 run"
    print("%-14s %9s %9s %9s %7s %6s  %s" % ("phase", "p50 ms", "p99 ms", "max ms", "n", "errors",
                                            "server RSS start -> peak MiB (median)"))
    summary = {}
    for ph in phases:
        rs = results[ph]
        p50s = [r["p50_ms"] for r in rs if r["p50_ms"] is not None]
        p99s = [r["p99_ms"] for r in rs if r["p99_ms"] is not None]
        maxs = [r["max_ms"] for r in rs if r["max_ms"] is not None]
        sm = {"runs": len(rs), "p50_ms": statistics.median(p50s) if p50s else None,
              "p99_ms": statistics.median(p99s) if p99s else None, "max_ms": max(maxs) if maxs else None,
              "n": sum(r["n"] for r in rs), "errors": sum(r["errors"] for r in rs),
              "rss_start_mib": statistics.median(r["rss_start_mib"] for r in rs),
              "rss_peak_mib": statistics.median(r["rss_peak_mib"] for r in rs),
              "killed": sum(1 for r in rs if r["killed"])}
        summary[ph] = sm
        print("%-14s %9s %9s %9s %7d %6d  %.1f -> %.1f%s" % (
            ph, fmt(sm["p50_ms"], 9).strip(), fmt(sm["p99_ms"], 9).strip(), fmt(sm["max_ms"], 9).strip(),
            sm["n"], sm["errors"], sm["rss_start_mib"], sm["rss_peak_mib"],
            "  (%d server%s SIGKILLed)" % (sm["killed"], "" if sm["killed"] == 1 else "s") if sm["killed"] else ""))
    print("(p50/p99: %s; max: over all runs; n, errors: all runs)" % med)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bin": a.bin, "model": a.model, "config": {k: v for k, v in vars(a).items()},
                       "pinning": b.pin_note, "context_note": b.ctx_note, "summary": summary, "runs": results},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
