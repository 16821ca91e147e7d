#!/usr/bin/env bash
# A local weft fleet (real instances pinned with taskset, or --mock ones),
# each routing policy on the same workload, one table and a plot:
#   bench/fleet.sh [real-shared real-unique mock-speeds mock-speeds-burst mock-hot mock-latency] [--runs 3]
# See bench/fleet.py for the scenarios. Build first (cmake --build build).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/fleet.py "$@"
