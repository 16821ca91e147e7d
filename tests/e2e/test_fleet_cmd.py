"""`weft fleet` end to end: one command starts the instances, the router and
(with --redis) redis-server; the OpenAI SDK is served through one port; an
instance killed mid-load loses no request (the router retries and migrates)
and is restarted, back in the router's rotation; SIGTERM stops everything.
Also the router's --hold-empty-s (scale from zero): requests wait for an
instance to come up instead of failing.

The oracle is a single instance: every answer through the fleet equals the
CPU instance's own greedy answer, asked directly."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import ROOT, SANITIZED, WEFT, Router, Server, default_model, metric_in

N_TOK = 32
# the kill test's model: small enough that lavapipe under the validation layer keeps up, and
# in Q4_1, which lavapipe computes in the CPU's exact forms (README, "Correctness"): any
# instance, and any mix of them in a migrated stream, gives the single CPU instance's tokens
SYNTH = os.path.join(os.environ.get("WEFT_SHARED_DIR", os.path.join(ROOT, "..", "shared")), "models",
                     "synth256-Q4_1.gguf")


def vulkan_device():
    """'vulkan:0' when this build sees a Vulkan device (lavapipe in CI), else None."""
    try:
        out = subprocess.run([WEFT, "devices", "--json"], capture_output=True, text=True, timeout=60).stdout
        devs = json.loads(out)
    except Exception:
        return None
    for d in devs:
        if d.get("backend") == "vulkan" and d.get("available"):
            return d["id"]
    return None


def http_get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Fleet:
    """`weft fleet` as a child: its stderr read on a thread, the ready summary parsed."""

    def __init__(self, *args, env=None, model=None, port=0):
        model = model or default_model()
        if not os.path.exists(model):
            pytest.skip(f"model {model} is not fetched (bash scripts/fetch-model.sh)")
        if not os.path.exists(WEFT):
            pytest.skip(f"{WEFT} is not built")
        self.proc = subprocess.Popen([WEFT, "fleet", "-m", model, "--port", str(port), *args], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
                                     start_new_session=True)
        self.log = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        line = self.wait_line(r"weft fleet: ready: OpenAI API at (\S+)/v1", timeout=240)
        self.base = re.search(r"at (\S+)/v1", line).group(1)
        self.wait_line(r"weft fleet: router \S+ pid=")  # the summary's last line but Redis's
        if "--redis" in args:
            self.wait_line(r"weft fleet: redis \S+ pid=")
        self.instances = {}  # name -> (url, pid)
        for ln in self.lines():
            m = re.match(r"weft fleet: instance (\S+) (\S+) device=\S+ role=\S+ pid=(\d+)", ln)
            if m:
                self.instances[m.group(1)] = (m.group(2), int(m.group(3)))
            m = re.match(r"weft fleet: router \S+ pid=(\d+)", ln)
            if m:
                self.router_pid = int(m.group(1))
            m = re.match(r"weft fleet: redis (\S+) pid=(\d+)", ln)
            if m:
                self.redis_url, self.redis_pid = m.group(1), int(m.group(2))

    def _read(self):
        for line in self.proc.stderr:
            with self.cond:
                self.log.append(line.rstrip("\n"))
                self.cond.notify_all()

    def lines(self):
        with self.cond:
            return list(self.log)

    def wait_line(self, pattern, timeout=60, start=0):
        """The first line from index start on that matches pattern."""
        deadline = time.time() + timeout
        with self.cond:
            while True:
                for ln in self.log[start:]:
                    if re.search(pattern, ln):
                        return ln
                left = deadline - time.time()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"weft fleet never printed /{pattern}/:\n" + "\n".join(self.log[-40:]))
                self.cond.wait(min(left, 0.5))

    def metrics(self):
        status, text = http_get(self.base + "/metrics")
        assert status == 200
        return text

    def stop(self, timeout=90):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                raise AssertionError("weft fleet did not stop after SIGTERM:\n" + "\n".join(self.log[-40:]))
            assert rc == 0, "weft fleet exited %d:\n%s" % (rc, "\n".join(self.log[-40:]))

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def generate(client, stream, n_tok, prompt=None, messages=None):
    """One greedy request of n_tok tokens (EOS ignored) through the SDK, a
    completion (prompt) or a chat (messages), streamed or not:
    (text, finish_reason, completion tokens)."""
    kw = dict(model="default", max_tokens=n_tok, temperature=0, extra_body={"ignore_eos": True})
    api = client.chat.completions if messages else client.completions
    if messages:
        kw["messages"] = messages
    else:
        kw["prompt"] = prompt

    def text_of(choice):
        if messages:
            return (choice.delta.content if stream else choice.message.content) or ""
        return choice.text or ""

    if not stream:
        r = api.create(**kw)
        return text_of(r.choices[0]), r.choices[0].finish_reason, r.usage.completion_tokens
    text, finish, used = "", None, None
    for ch in api.create(**kw, stream=True, stream_options={"include_usage": True}):
        if ch.choices:
            text += text_of(ch.choices[0])
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            used = ch.usage.completion_tokens
    return text, finish, used


def instance_up(metrics_text, name_hostport):
    try:
        return metric_in(metrics_text, "weft_router_instance_up", {"instance": name_hostport})
    except KeyError:
        return None


STORY_PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a bird",
                 "Tom had a red ball", "The sun was hot and", "Mom said to Sue", "A big fish lived"]
STORY_TOK = 64


def story(client, i, stream):
    """Completion i of the kill test."""
    return generate(client, stream, STORY_TOK, prompt=STORY_PROMPTS[i % len(STORY_PROMPTS)])


@pytest.mark.skipif(SANITIZED, reason="the kill-and-restart load test runs in the Release build")
def test_fleet_serves_the_sdk_and_loses_nothing_when_an_instance_dies():
    """A CPU and a Vulkan (lavapipe, validation layer on) instance behind the
    fleet's router on a small Q4_1 model; the CPU instance is SIGKILLed with
    requests in flight."""
    openai = pytest.importorskip("openai")
    if not os.path.exists(SYNTH):
        pytest.skip(f"{SYNTH} is not there (../shared)")
    second = vulkan_device() or "cpu"
    fleet = Fleet("--instance", "device=cpu,threads=1,cpus=0,name=cpu", "--instance",
                  f"device={second},threads=1,cpus=1,name=second", "--router-arg", "--poll-ms", "--router-arg", "100",
                  "--drain-timeout", "20", env={"WEFT_VK_VALIDATE": "1"}, model=SYNTH)
    try:
        assert set(fleet.instances) == {"cpu", "second"}, fleet.lines()
        # the victim is the CPU instance: the router prefers it (it measures faster than lavapipe),
        # so it has requests in flight to lose
        cpu_url, victim_pid = fleet.instances["cpu"]
        victim = cpu_url.split("//")[1]
        # the oracle: the CPU instance alone, asked directly
        direct = openai.OpenAI(base_url=cpu_url + "/v1", api_key="none", max_retries=0, timeout=300)
        oracle = {i: story(direct, i, False) for i in range(len(STORY_PROMPTS))}
        for i, (text, finish, used) in oracle.items():
            assert finish == "length" and used == STORY_TOK, (i, oracle[i])

        client = openai.OpenAI(base_url=fleet.base + "/v1", api_key="none", max_retries=0, timeout=300)
        deadline = time.time() + 60
        while time.time() < deadline and not all(
                instance_up(fleet.metrics(), u.split("//")[1]) == 1 for u, _ in fleet.instances.values()):
            time.sleep(0.1)
        n_req, results, errors = 48, {}, []

        def worker(ids):
            for i in ids:
                try:
                    results[i] = story(client, i, stream=i % 3 != 0)
                except Exception as e:  # noqa: BLE001 (recorded, asserted below)
                    errors.append((i, repr(e)))

        threads = [threading.Thread(target=worker, args=(range(k, n_req, 4),)) for k in range(4)]
        for t in threads:
            t.start()
        # kill the CPU instance while the router has requests in flight there
        mark = len(fleet.lines())
        deadline = time.time() + 120
        while time.time() < deadline:
            if metric_in(fleet.metrics(), "weft_router_instance_inflight", {"instance": victim}) >= 2:
                break
        else:
            raise AssertionError("the CPU instance never had requests in flight")
        t_kill = time.time()
        os.kill(victim_pid, signal.SIGKILL)
        # the router sees it leave ...
        went_down = False
        while time.time() < t_kill + 60 and not went_down:
            went_down = instance_up(fleet.metrics(), victim) == 0
            time.sleep(0.01)
        fleet.wait_line(r"weft fleet: cpu \(pid %d\) ended by signal 9" % victim_pid, start=mark)
        fleet.wait_line(r"weft fleet: restarted cpu \(pid \d+\)", start=mark, timeout=60)
        # ... and return
        back_after = None
        while time.time() < t_kill + 120:
            if instance_up(fleet.metrics(), victim) == 1:
                back_after = time.time() - t_kill
                break
            time.sleep(0.02)
        for t in threads:
            t.join(timeout=600)
        assert not errors, errors
        assert went_down, "the router never saw the killed instance leave"
        assert back_after is not None, "the restarted instance never came back:\n" + "\n".join(fleet.lines()[-30:])
        print(f"\nfleet: CPU instance killed; the router saw it back after {back_after:.2f} s")
        fleet.wait_line(r"weft fleet: cpu is back \(pid \d+, restart 1\)", start=mark)
        # no request lost, none changed: every answer is the single instance's
        assert len(results) == n_req
        bad = [(i, got, oracle[i % len(STORY_PROMPTS)]) for i, got in sorted(results.items())
               if got != oracle[i % len(STORY_PROMPTS)]]
        assert not bad, bad
        m = fleet.metrics()
        moved = sum(float(v) for v in re.findall(r'^weft_router_(?:migrations|retries)_total\{[^}]*\} (\S+)$', m, re.M))
        assert moved >= 1, "the kill moved no request (it should have hit those in flight)"
        served_by_second = metric_in(m, "weft_router_requests_total", {"instance": fleet.instances["second"][0][7:]})
        print(f"fleet: {n_req} requests, all equal to the single instance's; {moved:.0f} retried or migrated, "
              f"{served_by_second:.0f} routed to the {second} instance")
        # back in the rotation: it takes requests again
        before = metric_in(m, "weft_router_requests_total", {"instance": victim})
        for rnd in range(5):
            worker([1000 + rnd * 4 + k for k in range(4)])
            if metric_in(fleet.metrics(), "weft_router_requests_total", {"instance": victim}) > before:
                break
        assert not errors, errors
        assert metric_in(fleet.metrics(), "weft_router_requests_total", {"instance": victim}) > before
        pids = [p for _, p in fleet.instances.values()] + [fleet.router_pid]
    finally:
        try:
            fleet.stop()
        finally:
            fleet.kill()
    # everything it started is gone
    new_pids = [int(x) for x in re.findall(r"restarted cpu \(pid (\d+)\)", "\n".join(fleet.lines()))]
    for p in pids + new_pids:
        assert not pid_alive(p), f"pid {p} outlived weft fleet"
    assert any("weft fleet: stopped" in ln for ln in fleet.lines())


def test_fleet_with_redis_starts_and_stops_it():
    """--redis: a local redis-server the instances write their KV blocks to; stopped last."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed (scripts/install-deps.sh installs it)")
    openai = pytest.importorskip("openai")
    fleet = Fleet("--instance", "device=cpu,threads=1,name=cpu", "--redis", "--serve-arg", "--no-calibrate",
                  "--drain-timeout", "10")
    try:
        client = openai.OpenAI(base_url=fleet.base + "/v1", api_key="none", max_retries=0, timeout=300)
        deadline = time.time() + 60
        while time.time() < deadline and http_get(fleet.base + "/ready")[0] != 200:
            time.sleep(0.05)
        chat = [{"role": "user", "content": "What is the capital of France?"}]
        text, finish, used = generate(client, False, N_TOK, messages=chat)
        assert finish == "length" and used == N_TOK
        assert generate(client, True, N_TOK, messages=chat) == (text, finish, used)
        # the instance writes its full blocks behind to the fleet's Redis
        port = int(fleet.redis_url.rsplit(":", 1)[1])
        deadline = time.time() + 60
        keys = 0
        while time.time() < deadline and keys == 0:
            out = subprocess.run(["redis-cli", "-p", str(port), "dbsize"], capture_output=True, text=True).stdout
            keys = int(out.strip() or 0)
            time.sleep(0.1)
        assert keys >= 1, "no KV block reached the fleet's Redis"
        redis_pid = fleet.redis_pid
    finally:
        try:
            fleet.stop()
        finally:
            fleet.kill()
    assert not pid_alive(redis_pid)
    lines = fleet.lines()
    # the order of the stop: router, then the instance, then Redis
    order = [i for i, ln in enumerate(lines) if re.match(r"weft fleet: (router|cpu|redis) \(pid", ln)]
    names = [re.match(r"weft fleet: (\S+)", lines[i]).group(1) for i in order]
    assert names == ["router", "cpu", "redis"], lines[-30:]


def test_fleet_dry_run_and_bad_specs():
    if not os.path.exists(WEFT):
        pytest.skip(f"{WEFT} is not built")
    model = default_model()
    r = subprocess.run([WEFT, "fleet", "-m", model, "--dry-run", "--port", "9100", "--instance",
                        "device=cpu,threads=3,role=prefill,class=cpu,cpus=0-1", "--instance", "vulkan:0"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("cpu@9101: (cpus 0-1) ") and "serve" in lines[0] and "--port 9101" in lines[0]
    assert "--role prefill" in lines[0] and "-t 3" in lines[0] and "--device-class cpu" in lines[0]
    assert lines[1].startswith("vulkan:0@9102: ") and "--device vulkan:0" in lines[1]
    assert lines[2].startswith("router: ") and "--port 9100" in lines[2]
    assert "--instance http://127.0.0.1:9101 --instance http://127.0.0.1:9102" in lines[2]
    # default: an instance per device; a software Vulkan device is left out, and says so
    r = subprocess.run([WEFT, "fleet", "-m", model, "--dry-run"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("cpu@8001: ") or "vulkan" in r.stdout, r.stdout + r.stderr
    if vulkan_device():
        assert ("software device" in r.stderr) != ("vulkan:0@" in r.stdout), r.stdout + r.stderr
    for bad, word in [("device=cpu,speed=9", "speed"), ("role=fast", "role=fast"), ("threads=0", "threads")]:
        r = subprocess.run([WEFT, "fleet", "-m", model, "--instance", bad], capture_output=True, text=True)
        assert r.returncode == 2 and word in r.stderr, (bad, r.stderr)


def test_fleet_start_up_answers_every_request_never_503():
    """weft fleet's router listens while its instances still load: a client
    retrying its connect from the moment the process starts gets its answer
    (the router holds the request, --hold-startup-s), never a 503; /ready
    answers 503 "starting" until an instance is up. The instance's port is
    held here until the client's first /ready has its answer, so that answer
    comes before any instance can be up (an instance binding meanwhile fails
    and fleet restarts it)."""
    import socket
    while True:  # a free port for the router and one after it (the instance's), held
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        blocker = socket.socket()
        try:
            blocker.bind(("127.0.0.1", port + 1))
        except OSError:
            blocker.close()
            continue
        blocker.listen(64)
        break
    base = f"http://127.0.0.1:{port}"
    seen = {"ready": None, "answer": None}
    stop = threading.Event()

    def client():
        data = json.dumps({"prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode()
        while not stop.is_set():
            try:
                if seen["ready"] is None:
                    seen["ready"] = http_get(base + "/ready")
                    blocker.close()  # the instance may come up now
                rq = urllib.request.Request(base + "/v1/completions", data=data,
                                            headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(rq, timeout=300) as r:
                    seen["answer"] = (r.status, r.read().decode())
            except urllib.error.HTTPError as e:
                seen["answer"] = (e.code, e.read().decode())
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.005)  # not listening yet: connect again
                continue
            return

    t = threading.Thread(target=client)
    t.start()
    fleet = None
    try:
        fleet = Fleet("--instance", "device=cpu,threads=1", port=port)
        t.join(timeout=300)
        status, body = seen["ready"]
        assert status == 503 and json.loads(body)["status"] == "starting", seen
        assert seen["answer"] and seen["answer"][0] == 200, seen
        assert json.loads(seen["answer"][1])["usage"]["completion_tokens"] == 4
        status, body = http_get(base + "/ready")
        assert status == 200 and json.loads(body)["status"] == "ready", body
        m = fleet.metrics()
        assert metric_in(m, "weft_router_shed_total", {"reason": "no_instance"}) == 0
    finally:
        stop.set()
        blocker.close()
        t.join(timeout=10)
        if fleet:
            fleet.stop()


def test_router_holds_requests_until_an_instance_comes_up():
    """--hold-empty-s: with no instance up the router answers /ready and holds
    requests (an autoscaler scaling a class from zero) until one comes up;
    without one in time, 503 naming why."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    router = Router([f"http://127.0.0.1:{port}"], "--hold-empty-s", "120")
    inst = None
    try:
        status, body = router.get("/ready")
        assert status == 200 and "holding" in body, body
        out = {}

        def req():
            data = json.dumps({"prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode()
            rq = urllib.request.Request(router.base + "/v1/completions", data=data,
                                        headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(rq, timeout=300) as r:
                    out["status"], out["body"] = r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                out["status"], out["body"] = e.code, e.read().decode()

        t = threading.Thread(target=req)
        t.start()
        deadline = time.time() + 30
        while time.time() < deadline and sum(
                float(v) for v in re.findall(r'^weft_router_queue_depth\{[^}]*\} (\S+)$', router.get("/metrics")[1],
                                             re.M)) < 1:
            time.sleep(0.05)
        assert "status" not in out
        inst = Server("--port", str(port), threads=1)
        t.join(timeout=300)
        assert out.get("status") == 200, out
        assert json.loads(out["body"])["usage"]["completion_tokens"] == 4
        assert router.metric("weft_router_queued_total") >= 1
        assert router.metric("weft_router_shed_total", {"reason": "no_instance"}) == 0
    finally:
        router.stop()
        if inst:
            inst.stop()
    # nothing comes: 503 once the hold is over
    router = Router([f"http://127.0.0.1:{port}"], "--hold-empty-s", "1")
    try:
        data = json.dumps({"prompt": "Hello", "max_tokens": 4}).encode()
        rq = urllib.request.Request(router.base + "/v1/completions", data=data,
                                    headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(rq, timeout=60)
        assert e.value.code == 503 and "no instance came up" in e.value.read().decode()
        assert router.metric("weft_router_shed_total", {"reason": "no_instance"}) == 1
    finally:
        router.stop()
