"""weft router --instances-dns NAME:PORT, as a Kubernetes headless Service is
discovered: every address NAME resolves to is an instance, re-resolved
every --dns-interval-ms. On loopback: NAME is given 127.0.0.x addresses in
/etc/hosts (the test adds its lines and removes them; it skips where
/etc/hosts is not writable), instances listen on those addresses at one port."""
import http.client
import json
import os
import socket
import time

import pytest

from conftest import Router, Server, metric_in

NAME = "weft-dns-test-%d.invalid" % os.getpid()
HOSTS = "/etc/hosts"


def set_hosts(addrs):
    with open(HOSTS) as f:
        keep = [l for l in f.read().splitlines() if not l.endswith(" " + NAME)]
    with open(HOSTS, "w") as f:
        f.write("\n".join(keep + ["%s %s" % (a, NAME) for a in addrs]) + "\n")


def free_port(addrs):
    """A port free on every one of addrs."""
    for _ in range(50):
        s = socket.socket()
        s.bind((addrs[0], 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for a in addrs[1:]:
            t = socket.socket()
            try:
                t.bind((a, port))
            except OSError:
                ok = False
            t.close()
        if ok:
            return port
    raise RuntimeError("no common free port")


def instances(router):
    _, m = router.get("/metrics")
    return int(metric_in(m, "weft_router_instances")), m


def wait_for(router, want_up_names, timeout=60):
    """Until the router knows exactly these instances, all up (a state, polled)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        n, m = instances(router)
        up = set()
        for name in want_up_names:
            try:
                if metric_in(m, "weft_router_instance_up", {"instance": name}) == 1:
                    up.add(name)
            except KeyError:
                pass
        if n == len(want_up_names) and up == set(want_up_names):
            return
        time.sleep(0.05)
    raise AssertionError(f"the router did not converge on {want_up_names}:\n" + "".join(router.log[-10:]))


def test_instances_from_dns_join_and_leave():
    if not os.access(HOSTS, os.W_OK):
        pytest.skip("/etc/hosts is not writable here: cannot give a test name several loopback addresses")
    addrs = ["127.0.0.2", "127.0.0.3"]
    port = free_port(addrs)
    mocks = [Server("--mock", "prefill=50000,decode=1000", "--host", a, "--port", str(port), threads=1)
             for a in addrs]
    router = None
    try:
        set_hosts(addrs[:1])
        router = Router([], "--instances-dns", f"{NAME}:{port}", "--dns-interval-ms", "200",
                        "--policy", "round-robin")  # sequential requests on idle mocks: take turns
        wait_for(router, [f"127.0.0.2:{port}"])
        set_hosts(addrs)  # a pod joins the Service
        wait_for(router, [f"127.0.0.2:{port}", f"127.0.0.3:{port}"])
        conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=60)
        seen = set()
        for i in range(8):
            conn.request("POST", "/v1/completions", json.dumps({"prompt": "request %d " % i + "words " * 40,
                                                                "max_tokens": 2}),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            assert r.status == 200
            seen.add(r.getheader("x-weft-instance"))
        assert seen == {f"127.0.0.2:{port}", f"127.0.0.3:{port}"}  # both take traffic
        set_hosts(addrs[1:])  # a pod leaves
        wait_for(router, [f"127.0.0.3:{port}"])
        for i in range(4):
            conn.request("POST", "/v1/completions", json.dumps({"prompt": "after %d" % i, "max_tokens": 2}),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            assert r.status == 200 and r.getheader("x-weft-instance") == f"127.0.0.3:{port}"
        # the resolver failing (the name gone) keeps what the router has, rather than emptying the fleet
        set_hosts([])
        n0 = router.metric("weft_router_instances")
        deadline = time.time() + 5
        while not any("resolving" in l for l in router.log) and time.time() < deadline:
            time.sleep(0.05)
        assert any("resolving" in l for l in router.log), router.log[-5:]
        assert router.metric("weft_router_instances") == n0 == 1
        conn.close()
    finally:
        set_hosts([])
        if router:
            router.stop()
        for m in mocks:
            m.stop()
