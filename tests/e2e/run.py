"""ctest entry for the server's end-to-end tests: runs pytest on this folder
(WEFT_BIN names the weft binary under test). Exits 77 (ctest: skipped) when
pytest or the openai package is missing; scripts/install-deps.sh installs them."""
import os
import sys

try:
    import openai  # noqa: F401
    import pytest
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (pip install pytest openai)")
    sys.exit(77)

import subprocess

here = os.path.dirname(os.path.abspath(__file__))
weft = os.environ.get("WEFT_BIN", os.path.join(here, "..", "..", "build", "weft"))
usage = subprocess.run([weft, "--help"], capture_output=True, text=True)
if " serve " not in usage.stdout + usage.stderr:
    print(f"SKIP: {weft} has no serve command")
    sys.exit(77)
sys.exit(pytest.main([here, "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
