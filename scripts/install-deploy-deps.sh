#!/usr/bin/env bash
# Install what the deployment tests need (tests/e2e/test_deploy.py,
# tests/e2e/test_autoscale.py), on Debian/Ubuntu, if it is missing:
#   - prometheus (Debian's package: /usr/bin/prometheus), which test_autoscale
#     starts on loopback;
#   - the Python packages kubernetes-validate (Kubernetes' JSON schemas, shipped
#     inside the package: validation needs no network) and PyYAML, from PyPI.
# kubectl (for `kubectl kustomize`) is not in Debian's archive: install it from
# https://kubernetes.io/docs/tasks/tools/ (the tests skip without it).
# Meant to be called by scripts/install-deps.sh. Runs apt-get (as root, or
# through sudo) only when something is missing.
set -euo pipefail

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else echo "install-deploy-deps: need root (or sudo) to run: $*" >&2; return 1
    fi
}

if [ ! -x /usr/bin/prometheus ] && ! command -v prometheus >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "install-deploy-deps: installing prometheus"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get install -y --no-install-recommends prometheus ||
            { as_root apt-get update && as_root apt-get install -y --no-install-recommends prometheus; }
        # the package starts a system service on :9090; the tests run their own
        if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
            as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
        fi
    else
        echo "install-deploy-deps: prometheus is missing; install it with your package manager" >&2
    fi
fi

if ! python3 -c 'import kubernetes_validate, yaml' >/dev/null 2>&1; then
    echo "install-deploy-deps: pip install kubernetes-validate pyyaml"
    python3 -m pip install -q kubernetes-validate pyyaml 2>/dev/null ||
        python3 -m pip install -q --break-system-packages kubernetes-validate pyyaml
fi

command -v kubectl >/dev/null 2>&1 ||
    echo "install-deploy-deps: note: kubectl is not installed; the deployment tests will skip" >&2
echo "install-deploy-deps: ok"
