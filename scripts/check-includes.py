#!/usr/bin/env python3
"""The include direction of weft's layers (ARCHITECTURE.md: data flows one way),
checked on every source file: a file includes only files of its own layer or
of a layer below it. Layers, bottom to top:

  0 base      the bottom layer (status, types, the reference quantisers, rope,
              UTF-8 tables): includes nothing of weft's above it. Today these
              files live in core/ (BASE below names them).
  1 backends  backends/, kernels-common/, kernels-cuda/, kernels-hip/, shaders/:
              the vtable and its implementations, which know nothing of
              requests, models or the engine.
  2 core      the rest of core/ (engine, sched, kv, model, forward, ...).
  3 server    server/: weft serve and weft router.
  4 tools     tools/: the CLI.
  tests/, bench/ and tests/fuzz/ may include anything.

  scripts/check-includes.py [ROOT]   exit 1 and one line per upward include.
Only quoted includes of weft's own files are looked at ("dir/file.h" from the
repository root, or a bare "file.h" resolved beside the including file)."""
import os
import re
import sys

BASE = {"core/types.h", "core/types.c", "core/status.h", "core/status.c", "core/quant.h", "core/quant.c",
        "core/rope.h", "core/unicode.h", "core/unicode.c", "core/unicode_tables.h"}
LAYERS = [("base", None), ("backends", ("backends/", "kernels-common/", "kernels-cuda/", "kernels-hip/", "shaders/")),
          ("core", ("core/",)), ("server", ("server/",)), ("tools", ("tools/",))]
FREE = ("tests/", "bench/")
SOURCES = (".c", ".h", ".cu", ".cuh", ".hip", ".cpp", ".comp", ".glsl")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer(path):
    """(rank, name) of a repository-relative path; None for files outside the layers"""
    if path in BASE:
        return 0, "base"
    for rank, (name, dirs) in enumerate(LAYERS):
        if dirs and path.startswith(dirs):
            return rank, name
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = checked = 0
    for top in [d for _, dirs in LAYERS if dirs for d in dirs]:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                if path.startswith(FREE):
                    continue
                own = layer(path)
                if own is None:
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    if "/" not in inc:  # beside the including file
                        inc = os.path.normpath(os.path.join(os.path.dirname(path), inc)).replace(os.sep, "/")
                    target = layer(inc)
                    if target is None:
                        continue  # generated files, system-like quoted includes
                    checked += 1
                    if target[0] > own[0]:
                        line = text.count("\n", 0, m.start()) + 1
                        print(f"check-includes: {path}:{line}: {own[1]} includes {inc} ({target[1]}, a layer above)")
                        bad += 1
    print(f"check-includes: {checked} includes of weft's files checked, {bad} upward")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
