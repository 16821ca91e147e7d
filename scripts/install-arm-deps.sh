#!/usr/bin/env bash
# What cross-building weft for 64-bit ARM and testing it under qemu needs, from Debian:
# the AArch64 cross compilers, qemu-user-static, and weft's libraries for arm64 through
# multiarch. Only packages that sit beside the host's are taken: Debian's
# libhttp-parser-dev is not multi-arch (installing its arm64 package removes the host's,
# and the host build then fails to link), so only its runtime library comes for arm64
# (cmake/aarch64-linux-gnu.cmake links it, with the host's header).
#   scripts/install-arm-deps.sh        (root, or sudo)
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "install-arm-deps: need root (or sudo) to run: $*" >&2; return 1; fi; }
pkgs=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
      libssl-dev:arm64 libjansson-dev:arm64 libuv1-dev:arm64 libhiredis-dev:arm64 libhttp-parser2.9:arm64)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then echo "install-arm-deps: ok"; exit 0; fi
dpkg --print-foreign-architectures | grep -qx arm64 || as_root dpkg --add-architecture arm64
as_root apt-get update -q
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
# the host's own http-parser headers and library must still be there
dpkg-query -W -f='${Status}' libhttp-parser-dev 2>/dev/null | grep -q "ok installed" ||
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends libhttp-parser-dev
echo "install-arm-deps: ok"
