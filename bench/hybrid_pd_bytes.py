"""What a PD hand-off of a hybrid model moves: a prefill and a decode instance behind weft
router on the Qwen3.5-0.8B shape (bench/hybrid_cpu.sh makes and caches it: weft gen --preset
qwen35-0.8b, Q4_K_M), one prompt of about 2k tokens; prints the bytes pushed, the state
checkpoints the prefill instance took and the one the decode instance imported and resumed
from (the hand-off carries only that one: core/engine.h's weft_engine_kv_export_hashes_ckpt).
  python3 bench/hybrid_pd_bytes.py [MODEL]"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from conftest import Router, Server  # noqa: E402
from test_kv_remote import complete  # noqa: E402

M = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/weft/bench/qwen35-0.8b-Q4_K_M.gguf")
WORDS = ("amber basalt cedar delta ember fjord glacier harbor island juniper kelp lagoon meadow "
         "nectar orchard prairie quartz river summit tundra valley willow").split()
text = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(880))
p = Server("--role", "prefill", "-c", "4096", model=M, threads=1, cpu=0)
d = Server("--role", "decode", "-c", "4096", "--pd-idle-ms", "60000", model=M, threads=1, cpu=1)
r = Router([p, d], "--pd-threshold", "64", "--pd-slack", "8")
try:
    r.wait_ready(n_up=2)
    t0 = time.time()
    got = complete(r, text, max_tokens=8)
    n = got["usage"]["prompt_tokens"]
    ck = p.metric("weft_state_checkpoint_bytes")
    print(f"prompt {n} tokens, {got['usage']['prompt_tokens_details']['cached_tokens']} cached on the decode side "
          f"({time.time() - t0:.1f} s)")
    print(f"pushed {p.metric('weft_pd_pushed_bytes_total') / 1e6:.1f} MB: K/V "
          f"{p.metric('weft_kv_bytes_per_token') * (n - 1) // 16 * 16 / 1e6:.1f} MB + state checkpoints of "
          f"{ck / 1e6:.1f} MB each")
    print(f"checkpoints: {p.metric('weft_state_checkpoints_stored_total'):.0f} taken by the prefill instance, "
          f"{d.metric('weft_state_checkpoints_imported_total'):.0f} imported and "
          f"{d.metric('weft_state_checkpoint_hits_total'):.0f} restored by the decode instance")
finally:
    for s in (r, p, d):
        s.stop()
