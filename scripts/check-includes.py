#!/usr/bin/env python3
"""The include direction of weft's layers (../shared/design/ARCHITECTURE.md: data flows one way),
checked on every source file: a file includes only files of its own layer or
of a layer below it. Layers, bottom to top:

  0 base      base/: the bottom layer (status, types and block layouts, the
              reference quantisers, rope, options, UTF-8): includes nothing of
              weft's above it.
  1 backends  backends/, kernels-common/, kernels-cuda/, kernels-hip/, shaders/:
              the vtable and its implementations, which know nothing of
              requests, models or the engine.
  2 core      the rest of core/ (engine, sched, kv, model, forward, ...).
  3 server    server/: weft serve and weft router.
  4 tools     tools/: the CLI.
  tests/, bench/ and tests/fuzz/ may include anything.
The build checks the same direction at link time for base/ and backends/
(CMakeLists.txt's weft_base_closed and weft_backends_closed).
It also reports a getenv() outside tools/ (the library reads no environment),
and an include of a header private to its folder (core/model_impl.h) from outside it.

  scripts/check-includes.py [ROOT]   exit 1 and one line per upward include.
Only quoted includes are looked at, resolved as the compiler does: beside the
including file first, then from the repository root (weft's include path). One
that names a file of a layer folder that exists in neither place is reported
too, and so is a layer folder that is missing or a run that checked nothing
(a wrong ROOT must not pass)."""
import os
import re
import sys

BASE = {"base/types.h", "base/types.c", "base/status.h", "base/status.c", "base/quant.h", "base/quant.c",
        "base/rope.h", "base/unicode.h", "base/unicode.c", "base/unicode_tables.h", "base/options.h"}
# The environment is read in tools/ alone (tools/env.c turns WEFT_* into the
# options of base/options.h): a getenv() in any other layer is reported.
GETENV = re.compile(r'\bgetenv\s*\(\s*"?([A-Za-z0-9_]*)')
LAYERS = [("base", ("base/",)), ("backends", ("backends/", "kernels-common/", "kernels-cuda/", "kernels-hip/", "shaders/")),
          ("core", ("core/",)), ("server", ("server/",)), ("tools", ("tools/",))]
# written into the build folder at build time (backends/vulkan/CMakeLists.txt)
GENERATED = {"weft_blocks.glsl"}
# headers private to their layer's own folder (and tests): their layout is no one else's
PRIVATE = {"core/model_impl.h": "core/"}
SOURCES = (".c", ".h", ".cu", ".cuh", ".hip", ".cpp", ".comp", ".glsl")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer(path):
    """(rank, name) of a repository-relative path; None for files outside the layers"""
    for rank, (name, dirs) in enumerate(LAYERS):
        if dirs and path.startswith(dirs):
            return rank, name
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = checked = 0
    for _, dirs in LAYERS:
        for d in dirs or ():
            if not os.path.isdir(os.path.join(root, d)):
                print(f"check-includes: {root}: no {d} folder")
                bad += 1
    for top in [d for _, dirs in LAYERS if dirs for d in dirs]:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                own = layer(path)
                if own is None:
                    continue
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                if own[1] != "tools":
                    for m in GETENV.finditer(text):
                        if text[max(0, m.start() - 1)] in "_.>":
                            continue
                        line = text.count("\n", 0, m.start()) + 1
                        print(f"check-includes: {path}:{line}: getenv({m.group(1) or '...'}) outside tools/ "
                              "(the environment is tools/env.c's to read)")
                        bad += 1
                for m in INCLUDE.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    beside = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1))).replace(os.sep, "/")
                    if os.path.isfile(os.path.join(root, beside)):
                        inc = beside
                    else:
                        inc = os.path.normpath(m.group(1)).replace(os.sep, "/")
                        if not os.path.isfile(os.path.join(root, inc)):
                            if m.group(1) not in GENERATED and (layer(inc) is not None or layer(beside) is not None):
                                print(f"check-includes: {path}:{line}: {m.group(1)} is not a file")
                                bad += 1
                            continue  # generated in the build folder, or a system header in quotes
                    target = layer(inc)
                    if target is None:
                        continue
                    checked += 1
                    if inc in PRIVATE and not path.startswith(PRIVATE[inc]):
                        print(f"check-includes: {path}:{line}: includes {inc}, private to {PRIVATE[inc]} "
                              "(use its public header's accessors)")
                        bad += 1
                    if target[0] > own[0]:
                        print(f"check-includes: {path}:{line}: {own[1]} includes {inc} ({target[1]}, a layer above)")
                        bad += 1
    print(f"check-includes: {checked} includes of weft's files checked, {bad} problems")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
