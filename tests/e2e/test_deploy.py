"""The Kubernetes deployment (deploy/k8s) rendered offline: every overlay
renders with `kubectl kustomize`; every object Kubernetes itself defines
validates (strict) with kubernetes-validate against a current Kubernetes
(its schemas ship in the package: no network); the custom resources it has no
schemas for (KEDA ScaledObject, Prometheus Operator ServiceMonitor/PodMonitor)
are checked against the fields their documented specs require; the pieces
fit together (Services select the pods they name, the router finds the
headless Service, the instances find Redis, the monitors find their ports,
each ScaledObject/HPA targets a Deployment of the same render, the HPA's
external metrics are defined by the prometheus-adapter rules with the very
PromQL of the ScaledObjects); the probes and grace period match weft's drain;
deploy/Containerfile installs every library build/weft links.

The binary is not run here (test_autoscale runs the queries against a real
Prometheus), so this is skipped under the sanitizers' second e2e run."""
import functools
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse

import pytest

from conftest import ROOT, SANITIZED, WEFT

K8S = os.path.join(ROOT, "deploy", "k8s")
OVERLAYS = sorted(d for d in os.listdir(os.path.join(K8S, "overlays"))
                  if os.path.isfile(os.path.join(K8S, "overlays", d, "kustomization.yaml")))
NAMESPACE = "weft"
# kubectl 1.32 is what renders here; kubernetes-validate's newest schemas are newer
K8S_VERSION = "1.32"
CUSTOM_GROUPS = ("keda.sh", "monitoring.coreos.com")
DEVICES = {"cpu": ("cpu", None), "nvidia": ("cuda:0", "nvidia.com/gpu"), "amd": ("hip:0", "amd.com/gpu")}


def need_tools():
    if SANITIZED:
        pytest.skip("the deployment tests do not run the binary: nothing for the sanitizers to check")
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed (it renders the kustomizations)")
    pytest.importorskip("yaml", reason="PyYAML is not installed (scripts/install-deploy-deps.sh)")


@functools.lru_cache(maxsize=None)
def render_text(path):
    r = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"kubectl kustomize {path} failed:\n{r.stderr}"
    return r.stdout


def render(overlay):
    """The objects `kubectl kustomize deploy/k8s/overlays/<overlay>` renders (fresh copies)."""
    import yaml
    return [d for d in yaml.safe_load_all(render_text(os.path.join(K8S, "overlays", overlay))) if d]


def find(objs, kind, name=None):
    out = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    if name is not None:
        assert len(out) == 1, f"{kind}/{name}: {len(out)} in the render"
        return out[0]
    return out


def group(obj):
    api = obj["apiVersion"]
    return api.split("/")[0] if "/" in api else ""


def container(deploy, name=None):
    cs = deploy["spec"]["template"]["spec"]["containers"]
    return cs[0] if name is None else next(c for c in cs if c["name"] == name)


def arg(c, flag):
    """The value after `flag` in the container's args (None when absent)."""
    a = [str(x) for x in c.get("args", [])]
    return a[a.index(flag) + 1] if flag in a else None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def instance_deployments(objs):
    return [d for d in find(objs, "Deployment")
            if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "instance"]


def class_of(deploy):
    return deploy["spec"]["template"]["metadata"]["labels"]["weft.dev/device-class"]


def duration_s(text):
    """'5s', '1m', '30s' (Prometheus durations) -> seconds."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    assert m, f"not a duration: {text}"
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def adapter_rules(objs):
    """prometheus-adapter's externalRules from the rules ConfigMap, by exposed name."""
    import yaml
    cm = find(objs, "ConfigMap", "weft-prometheus-adapter-rules")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    return {r["name"]["as"]: r for r in cfg["externalRules"]}


def adapter_query(rule, selector):
    """The PromQL prometheus-adapter runs for an External metric with this
    selector (matchLabels only; namespaced: false adds no namespace): its
    <<.LabelMatchers>> are the selector's label="value" pairs joined by ','."""
    matchers = ",".join(f'{k}="{v}"' for k, v in sorted((selector or {}).get("matchLabels", {}).items()))
    q = rule["metricsQuery"].replace("<<.LabelMatchers>>", matchers).replace("<<.Series>>", "")
    assert "<<" not in q, f"a template the test does not expand: {q}"
    return q


def hpa_signals(objs, hpa):
    """[(metric name, query, target type, threshold)] of an HPA's External metrics."""
    rules = adapter_rules(objs)
    out = []
    for m in hpa["spec"]["metrics"]:
        assert m["type"] == "External", m
        name = m["external"]["metric"]["name"]
        assert name in rules, f"HPA {hpa['metadata']['name']}: {name} is not defined by the adapter rules"
        t = m["external"]["target"]
        val = t["averageValue"] if t["type"] == "AverageValue" else t["value"]
        out.append((name, adapter_query(rules[name], m["external"]["metric"].get("selector")), t["type"], float(val)))
    return out


def keda_signals(so):
    """[(trigger name, query, metric type, threshold, activation)] of a ScaledObject."""
    return [(t.get("name"), t["metadata"]["query"], t.get("metricType", "AverageValue"),
             float(t["metadata"]["threshold"]), float(t["metadata"].get("activationThreshold", 0)))
            for t in so["spec"]["triggers"]]


@pytest.fixture(scope="module", autouse=True)
def tools():
    need_tools()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders(overlay):
    objs = render(overlay)
    ids = [(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(ids) == len(set(ids)), f"{overlay}: an object twice"
    for o in objs:
        if o["kind"] != "Namespace":
            assert o["metadata"].get("namespace") == NAMESPACE, f"{overlay}: {o['kind']}/{o['metadata']['name']}"
        assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "weft"
    # what every overlay has: the router, its Service, the headless Service, Redis, an instance class
    for kind, name in (("Deployment", "weft-router"), ("Service", "weft-router"), ("Service", "weft-instances"),
                       ("Deployment", "weft-redis"), ("Service", "weft-redis"), ("Namespace", NAMESPACE)):
        find(objs, kind, name)
    assert instance_deployments(objs), f"{overlay}: no instance Deployment"


def test_overlays_cover_the_classes():
    """cpu-only, nvidia, amd: one class each; mixed: all three; hpa*: HPAs, not ScaledObjects."""
    for overlay, classes in (("cpu-only", {"cpu"}), ("nvidia", {"nvidia"}), ("amd", {"amd"}),
                             ("mixed", {"cpu", "nvidia", "amd"}), ("hpa", {"cpu"}),
                             ("hpa-mixed", {"cpu", "nvidia", "amd"})):
        objs = render(overlay)
        assert {class_of(d) for d in instance_deployments(objs)} == classes, overlay
        scalers = find(objs, "HorizontalPodAutoscaler" if overlay.startswith("hpa") else "ScaledObject")
        assert {s["spec"]["scaleTargetRef"]["name"] for s in scalers} == {"weft-" + c for c in classes}, overlay
        if overlay.startswith("hpa"):
            assert not find(objs, "ScaledObject"), overlay
    assert not [o for o in render("minimal") if group(o) in CUSTOM_GROUPS], "minimal has custom resources"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_objects_validate(overlay):
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed "
                             "(scripts/install-deploy-deps.sh)")
    import kubernetes_validate.utils as kvu
    assert K8S_VERSION in [kvu.major_minor(v) for v in kvu.all_versions()], \
        f"kubernetes-validate {kv.__version__} ships no schemas for {K8S_VERSION}"
    n = 0
    for o in render(overlay):
        if group(o) in CUSTOM_GROUPS:
            continue  # no schemas: test_custom_resources
        try:
            assert kv.validate(o, K8S_VERSION, strict=True) == K8S_VERSION
        except kv.ValidationError as e:
            pytest.fail(f"{overlay}: {o['kind']}/{o['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}")
        n += 1
    assert n >= 7
    # the check is not vacuous: a misspelt field fails strict validation
    bad = find(render(overlay), "Deployment", "weft-router")
    bad["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_instances(overlay):
    """Per class: image/device/resources, labels, probes, draining termination, non-root, volumes."""
    objs = render(overlay)
    for d in instance_deployments(objs):
        cls = class_of(d)
        assert d["metadata"]["name"] == "weft-" + cls
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "weft" and labels["app.kubernetes.io/component"] == "instance"
        assert selects(d["spec"]["selector"]["matchLabels"], labels)
        pod = d["spec"]["template"]["spec"]
        c = container(d, "weft")
        a = [str(x) for x in c["args"]]
        assert a[0] == "serve"
        device, resource = DEVICES[cls]
        assert arg(c, "--device") == device and arg(c, "--device-class") == cls
        assert arg(c, "--host") == "0.0.0.0" and arg(c, "--port") == "8080"
        assert int(arg(c, "--max-seqs")) >= 1 and int(arg(c, "-t")) >= 1
        limits = c["resources"]["limits"]
        if resource:
            assert int(limits[resource]) == 1, f"{cls}: {resource}"
        for other in ("nvidia.com/gpu", "amd.com/gpu"):
            if other != resource:
                assert other not in limits
        # the port the probes, the headless Service and the PodMonitor use
        port = next(p for p in c["ports"] if p["name"] == "http")
        assert port["containerPort"] == int(arg(c, "--port"))
        assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
        assert c["livenessProbe"]["httpGet"]["path"] == "/health"
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert c[probe]["httpGet"]["port"] in ("http", port["containerPort"]), probe
        check_drain(pod, c, int(arg(c, "--drain-timeout")))
        check_non_root(pod, c)
        # the model: -m names a file on a read-only volume that an initContainer fills
        model = arg(c, "-m")
        vol = mount_of(c, model)
        assert vol["readOnly"] is True
        fillers = [i for i in pod.get("initContainers", [])
                   if any(m["name"] == vol["name"] for m in i.get("volumeMounts", []))]
        assert fillers, f"{cls}: nothing puts {model} on volume {vol['name']}"
        # WEFT_CACHE_DIR on a writable emptyDir
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        cache = mount_of(c, env["WEFT_CACHE_DIR"] + "/x")
        assert not cache.get("readOnly")
        assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == cache["name"])
        # the fleet secret from the operator's Secret (never a value in the manifests)
        check_fleet_secret(c)
        # Redis for the remote KV tier: a Service of the render, on a port a pod serves
        url = urllib.parse.urlparse(arg(c, "--kv-remote"))
        assert url.scheme == "redis"
        svc = find(objs, "Service", url.hostname)
        assert any(p["port"] == url.port for p in svc["spec"]["ports"])
        assert pods_of(objs, svc), f"Service {url.hostname} selects no pod"
        # scrape annotations (Prometheus without the operator)
        ann = d["spec"]["template"]["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
        assert int(ann["prometheus.io/port"]) == port["containerPort"]


def check_fleet_secret(c):
    env = {e["name"]: e for e in c.get("env", [])}
    sec = env["WEFT_KV_SECRET"]
    assert "value" not in sec
    ref = sec["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "weft-fleet", "key": "kv-secret"}, ref


def mount_of(c, path):
    """The volumeMount a path lies on (the longest mountPath prefix)."""
    ms = [m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert ms, f"{path} is on no volume"
    return max(ms, key=lambda m: len(m["mountPath"]))


def check_drain(pod, c, drain_s):
    """preStop sleeps (endpoints update first), then SIGTERM drains for up to
    drain_s: the grace period must hold both, with room to exit."""
    pre = c["lifecycle"]["preStop"]
    if "sleep" in pre:
        pre_s = int(pre["sleep"]["seconds"])
    else:
        cmd = [str(x) for x in pre["exec"]["command"]]
        assert cmd[0] == "sleep" and len(cmd) == 2, cmd
        pre_s = int(cmd[1])
    assert 1 <= pre_s <= 30
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > pre_s + drain_s, f"grace {grace} s <= preStop {pre_s} s + drain {drain_s} s"
    # readiness fails fast enough that a draining pod leaves the endpoints during preStop
    rp = c["readinessProbe"]
    assert rp["periodSeconds"] * rp.get("failureThreshold", 3) <= pre_s


def check_non_root(pod, c):
    sc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    assert sc.get("runAsNonRoot") is True
    assert (csc.get("runAsUser") or sc.get("runAsUser") or 0) != 0
    assert csc.get("allowPrivilegeEscalation") is False
    assert csc.get("readOnlyRootFilesystem") is True
    assert "ALL" in csc.get("capabilities", {}).get("drop", [])
    for i in pod.get("initContainers", []):
        assert i["securityContext"].get("allowPrivilegeEscalation") is False
        assert i["securityContext"].get("readOnlyRootFilesystem") is True


def pods_of(objs, svc):
    return [d for d in find(objs, "Deployment") if selects(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_and_router(overlay):
    objs = render(overlay)
    headless = find(objs, "Service", "weft-instances")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"].get("publishNotReadyAddresses") is False
    # it selects every instance class and nothing else
    assert {d["metadata"]["name"] for d in pods_of(objs, headless)} == \
        {d["metadata"]["name"] for d in instance_deployments(objs)}
    hport = headless["spec"]["ports"][0]
    for d in instance_deployments(objs):
        assert hport["targetPort"] in [p["name"] for p in container(d)["ports"]]
    # the router resolves exactly that Service in its own namespace
    router = find(objs, "Deployment", "weft-router")
    c = container(router, "router")
    assert c["args"][0] == "router"
    host, _, port = arg(c, "--instances-dns").rpartition(":")
    env = {e["name"]: e for e in c["env"]}
    ns_var = re.fullmatch(r"weft-instances\.\$\((\w+)\)\.svc\.cluster\.local", host)
    assert ns_var, host
    assert env[ns_var.group(1)]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert int(port) == hport["port"]
    assert float(arg(c, "--hold-empty-s")) > 0
    check_fleet_secret(c)  # it authenticates to the instances as a fleet member
    assert arg(c, "--host") == "0.0.0.0"
    rport = int(arg(c, "--port"))
    assert next(p for p in c["ports"] if p["name"] == "http")["containerPort"] == rport
    assert os.path.basename(arg(c, "-m")) == os.path.basename(arg(container(instance_deployments(objs)[0]), "-m"))
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    pod = router["spec"]["template"]["spec"]
    # the router's streams end within the instances' drain: its grace period holds that too
    check_drain(pod, c, max(int(arg(container(d), "--drain-timeout")) for d in instance_deployments(objs)))
    check_non_root(pod, c)
    rsvc = find(objs, "Service", "weft-router")
    assert [d["metadata"]["name"] for d in pods_of(objs, rsvc)] == ["weft-router"]
    assert rsvc["spec"]["ports"][0]["targetPort"] == "http"
    assert router["spec"]["replicas"] == 1  # the queries sum one router's queue


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "minimal"])
def test_monitors(overlay):
    """ServiceMonitor and PodMonitor (monitoring.coreos.com/v1), against the
    fields the Prometheus Operator's API requires and the objects they select."""
    objs = render(overlay)
    sm = find(objs, "ServiceMonitor", "weft-router")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    spec = sm["spec"]
    rsvc = find(objs, "Service", "weft-router")
    # spec.selector is required; it must select the router's Service (same namespace by default)
    assert selects(spec["selector"]["matchLabels"], rsvc["metadata"]["labels"])
    assert not [s for s in find(objs, "Service") if s is not rsvc and selects(spec["selector"]["matchLabels"], s["metadata"]["labels"])]
    (ep,) = spec["endpoints"]
    assert ep["port"] in [p["name"] for p in rsvc["spec"]["ports"]]
    assert ep["path"] == "/metrics" and ep.get("scheme", "http") == "http"
    assert duration_s(ep["scrapeTimeout"]) < duration_s(ep["interval"]) <= 15
    assert ep["honorLabels"] is True  # the router's per-instance series have their own `instance`
    pm = find(objs, "PodMonitor", "weft-instances")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    (pep,) = pm["spec"]["podMetricsEndpoints"]
    for d in instance_deployments(objs):
        assert selects(pm["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])
        assert pep["port"] in [p["name"] for p in container(d)["ports"]]
    assert pep["path"] == "/metrics"
    assert duration_s(pep["scrapeTimeout"]) < duration_s(pep["interval"])


def rate_windows(query):
    return [duration_s(w) for w in re.findall(r"\[(\d+(?:ms|s|m|h))\]", query)]


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o not in ("minimal",) and not o.startswith("hpa")])
def test_scaled_objects(overlay):
    """KEDA ScaledObject (keda.sh/v1alpha1): scaleTargetRef names a Deployment
    of the render; min/max replica counts (CPU never below one, GPU classes
    from zero); triggers of type prometheus with serverAddress, query,
    threshold and activationThreshold; the class's own device_class only."""
    objs = render(overlay)
    sm_interval = duration_s(find(objs, "ServiceMonitor", "weft-router")["spec"]["endpoints"][0]["interval"])
    for so in find(objs, "ScaledObject"):
        assert so["apiVersion"] == "keda.sh/v1alpha1"
        spec = so["spec"]
        ref = spec["scaleTargetRef"]
        assert ref.get("kind", "Deployment") == "Deployment" and ref.get("apiVersion", "apps/v1") == "apps/v1"
        target = find(objs, "Deployment", ref["name"])
        cls = class_of(target)
        assert so["metadata"]["labels"]["weft.dev/device-class"] == cls
        lo, hi = spec["minReplicaCount"], spec["maxReplicaCount"]
        assert isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi and hi >= 1
        assert lo == (1 if cls == "cpu" else 0), f"{cls}: minReplicaCount {lo}"
        assert spec.get("cooldownPeriod", 300) >= 60 and 1 <= spec.get("pollingInterval", 30) <= 60
        names = [t.get("name") for t in spec["triggers"]]
        assert len(set(names)) == len(names) and None not in names
        assert {"queue", "ttft", "load"} <= set(names)
        for t in spec["triggers"]:
            assert t["type"] == "prometheus"
            md = t["metadata"]
            u = urllib.parse.urlparse(md["serverAddress"])
            assert u.scheme in ("http", "https") and u.hostname and u.port
            assert t.get("metricType", "AverageValue") in ("AverageValue", "Value")
            assert float(md["threshold"]) > 0 and float(md["activationThreshold"]) >= 0
            # KEDA's metadata values are strings
            assert all(isinstance(v, str) for v in md.values()), md
            q = md["query"]
            assert set(re.findall(r'device_class="([^"]*)"', q)) <= {cls}, f"{cls}: {q}"
            # rate windows hold at least five scrapes of the router
            for w in rate_windows(q):
                assert w >= 5 * sm_interval, q
        # the queue activates a class at zero: any held request
        queue = next(t for t in spec["triggers"] if t["name"] == "queue")
        assert float(queue["metadata"]["activationThreshold"]) == 0
        assert "weft_router_queue_depth" in queue["metadata"]["query"]


def test_triggers_agree_between_classes():
    """The classes' ScaledObjects run the same queries but for their class label."""
    objs = render("mixed")
    shapes = {}
    for so in find(objs, "ScaledObject"):
        cls = class_of(find(objs, "Deployment", so["spec"]["scaleTargetRef"]["name"]))
        shapes[cls] = [(n, q.replace(f'device_class="{cls}"', 'device_class="CLASS"'), t)
                       for n, q, t, _, _ in keda_signals(so)]
    assert len(shapes) == 3
    first = next(iter(shapes.values()))
    for cls, s in shapes.items():
        assert s == first, cls


def test_hpa_matches_keda():
    """Each HPA's external metrics are defined by the adapter's rules, and the
    PromQL the adapter runs for them (its template expanded with the HPA's
    selector), the target type and the threshold equal a trigger of the KEDA
    ScaledObject of the same class: one set of signals, two autoscalers."""
    keda, hpas = render("mixed"), render("hpa-mixed")
    for hpa in find(hpas, "HorizontalPodAutoscaler"):
        assert hpa["apiVersion"] == "autoscaling/v2"
        name = hpa["spec"]["scaleTargetRef"]["name"]
        find(hpas, "Deployment", name)
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        so = find(keda, "ScaledObject", name)
        triggers = {(q, t, th) for _, q, t, th, _ in keda_signals(so)}
        signals = hpa_signals(hpas, hpa)
        assert len(signals) == len(so["spec"]["triggers"])
        for metric, q, t, th in signals:
            assert (q, t, th) in triggers, f"{name}: {metric}: {t} {th} {q}\nis no trigger of ScaledObject {name}"
        assert hpa["spec"]["maxReplicas"] == so["spec"]["maxReplicaCount"]
    # every rule a metric of some HPA uses (no stale rules)
    used = {m["external"]["metric"]["name"] for h in find(hpas, "HorizontalPodAutoscaler") for m in h["spec"]["metrics"]}
    assert set(adapter_rules(hpas)) == used
    # prometheus-adapter discovers a metric by its seriesQuery: it names the series the query reads
    for name, r in adapter_rules(hpas).items():
        series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", r["seriesQuery"]).group(0)
        assert series in r["metricsQuery"], name
        assert r["resources"]["namespaced"] is False


def test_promql_parses():
    """Every query (KEDA's, and the adapter's expanded) is valid PromQL: promtool
    checks them as recording rules (offline)."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    import yaml
    queries = set()
    for so in find(render("mixed"), "ScaledObject"):
        queries |= {q for _, q, _, _, _ in keda_signals(so)}
    hpas = render("hpa-mixed")
    for hpa in find(hpas, "HorizontalPodAutoscaler"):
        queries |= {q for _, q, _, _ in hpa_signals(hpas, hpa)}
    rules = {"groups": [{"name": "weft", "rules": [{"record": f"weft:q{i}", "expr": q}
                                                   for i, q in enumerate(sorted(queries))]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump(rules, f)
        f.flush()
        r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(queries)} rules found" in r.stdout, r.stdout


def containerfile():
    with open(os.path.join(ROOT, "deploy", "Containerfile")) as f:
        text = f.read()
    # join continuation lines, drop comments
    lines, cur = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") and not cur:
            continue
        cur += line.rstrip("\\") + " "
        if not line.endswith("\\"):
            lines.append(cur.strip())
            cur = ""
    return [l for l in lines if l]


def test_containerfile():
    """Builds from source on Debian 12, copies every folder CMake builds weft
    from, runs as uid 10001 with weft as the entrypoint, and its runtime
    stage installs the package of every shared library build/weft links
    (the image cannot be built here: no container runtime)."""
    lines = containerfile()
    froms = [l.split()[1] for l in lines if l.startswith("FROM ")]
    assert "debian:12" in froms and all(f.startswith("debian:12") for f in froms), froms
    stages = [l for l in lines if l.startswith("FROM ")]
    assert stages[-1].endswith("AS runtime"), "the runtime stage must be the default (last) one"
    build = lines[lines.index(next(l for l in stages if l.endswith("AS build"))):]
    build = build[:build.index(next(l for l in build[1:] if l.startswith("FROM ")))]
    runtime = lines[lines.index(stages[-1]):]
    copies = {l.split()[1] for l in build if l.startswith("COPY ") and "--from" not in l}
    for d in ("CMakeLists.txt", "core", "backends", "server", "tools", "shaders", "kernels-common", "kernels-cuda",
              "kernels-hip"):
        assert d in copies, f"Containerfile: COPY {d}"
        assert os.path.exists(os.path.join(ROOT, d))
    build_text = " ".join(build)
    for pkg in ("cmake", "gcc", "g++", "pkg-config", "libjansson-dev", "libuv1-dev", "libhttp-parser-dev",
                "libhiredis-dev", "libssl-dev", "glslc", "libvulkan-dev", "hipcc", "libamdhip64-dev"):
        assert re.search(r"(^|\s)" + re.escape(pkg) + r"(\s|;|$)", build_text), f"build stage: {pkg}"
    assert "-DCMAKE_BUILD_TYPE=Release" in build_text
    assert "USER 10001:10001" in runtime and 'ENTRYPOINT ["/usr/local/bin/weft"]' in runtime
    runtime_text = " ".join(runtime)
    if not (shutil.which("ldd") and shutil.which("dpkg") and os.path.exists(WEFT)):
        pytest.skip("no ldd/dpkg or no weft binary: the runtime libraries were not compared")
    needed = set()
    for binary in [WEFT] + [os.path.join(os.path.dirname(WEFT), "libweft-vulkan.so")]:
        if not os.path.exists(binary):
            continue
        out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        for path in re.findall(r"=> (/\S+)", out):
            owner = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
            if owner.returncode != 0:
                owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
            if owner.returncode == 0:
                needed.add(owner.stdout.split(":")[0])
    base = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}  # in debian:12-slim already
    missing = [p for p in sorted(needed - base) if not re.search(r"(^|\s)" + re.escape(p) + r"(\s|;|$)", runtime_text)]
    assert not missing, f"the runtime stage does not install {missing} (build/weft links them)"


def test_install_script():
    """scripts/install-deploy-deps.sh parses and installs what these tests import."""
    path = os.path.join(ROOT, "scripts", "install-deploy-deps.sh")
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", path]).returncode == 0
    text = open(path).read()
    for what in ("prometheus", "kubernetes-validate", "pyyaml"):
        assert what in text
