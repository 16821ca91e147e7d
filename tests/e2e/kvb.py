"""The KV block stream format v5 (base/kv_block.h), read and written in
Python for the tests that play a peer, honest or hostile: reframe a real
stream, forge a header or a block, make MACs under a fleet secret (or
none), recompute CRCs so that only the check under test can refuse it."""
import hashlib
import hmac
import struct

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


FIXED = 72
META = 88  # parent, hash, 16 token ids, block flags, reserved
MAC = 32
_FIELDS = ["magic", "version", "header_bytes", "fp_hi", "fp_lo", "block_tokens", "n_layer", "layer0", "n_layers",
           "n_blocks", "payload_bytes", "flags", "n_layout", "r0", "r1"]
_FMT = "<8sIIQQIIIIIIIIII"


def header(stream):
    """The header's fields as a dict (layout: a list of (kind, type, n_layers, a, b))."""
    h = dict(zip(_FIELDS, struct.unpack_from(_FMT, stream, 0)))
    h["layout"] = [struct.unpack_from("<BBHIII", stream, FIXED + 16 * i) for i in range(h["n_layout"])]
    h["layout"] = [(k, t, n, a, b) for k, t, _, n, a, b in h["layout"]]
    return h


def _body(h, n_blocks=None):
    b = struct.pack(_FMT, h["magic"], h["version"], FIXED + 16 * len(h["layout"]) + 4, h["fp_hi"], h["fp_lo"],
                    h["block_tokens"], h["n_layer"], h["layer0"], h["n_layers"],
                    h["n_blocks"] if n_blocks is None else n_blocks, h["payload_bytes"], h["flags"],
                    len(h["layout"]), h["r0"], h["r1"])
    for k, t, n, a, bb in h["layout"]:
        b += struct.pack("<BBHIII", k, t, 0, n, a, bb)
    return b


def write_header(h):
    b = _body(h)
    return b + struct.pack("<I", crc32c(b))


def mac_key(secret):
    return hmac.new(secret.encode(), b"weft kv block mac v2", hashlib.sha256).digest()


def record_bytes(h):
    return META + h["payload_bytes"] + (MAC if h["flags"] & 1 else 0) + 4


def state_bytes(h):
    """A state checkpoint's bytes: the STATE runs' (kind 5: a bytes a layer)."""
    return sum(n * a for k, _, n, a, _ in h["layout"] if k == 5)


def blocks(stream):
    """[(meta bytes, payload bytes)] of a stream (a record with a state checkpoint, flag
    bit 1, is longer by it: skipped over)."""
    h = header(stream)
    off, rec, out = h["header_bytes"], record_bytes(h), []
    while off < len(stream):
        meta = stream[off:off + META]
        out.append((meta, stream[off + META:off + META + h["payload_bytes"]]))
        off += rec + (state_bytes(h) if struct.unpack_from("<I", meta, 80)[0] & 2 else 0)
    return out


def write_block(h, meta, payload, secret=None):
    """One record under header h: with a MAC under secret when h says so
    (secret None then: a MAC of zeros, as a writer without the secret would)."""
    body = meta + payload
    if h["flags"] & 1:
        if secret:
            digest = hashlib.sha256(_body(h, n_blocks=0)).digest()
            body += hmac.new(mac_key(secret), digest + body, hashlib.sha256).digest()
        else:
            body += bytes(MAC)
    return body + struct.pack("<I", crc32c(body))


def restream(stream, secret, **changes):
    """The same blocks under a header with `changes` (fields, or layout),
    MACs made under secret (None: no MAC flag, unsigned), CRCs good."""
    h = header(stream)
    h2 = dict(h, **changes)
    h2["flags"] = 1 if secret else 0
    per_layer = h["payload_bytes"] // h["n_layers"]
    lo, n = h2["layer0"], h2["n_layers"]
    h2["payload_bytes"] = per_layer * n
    out = write_header(h2)
    for meta, payload in blocks(stream):
        out += write_block(h2, meta, payload[lo * per_layer:(lo + n) * per_layer], secret)
    return out


def reframe(stream, layer0, n_layers, secret):
    """The blocks as a stream of layers layer0..layer0+n_layers-1 only: every
    CRC and MAC good, every record whole for that range."""
    h = header(stream)
    layout = [(k, t, n_layers, a, b) for k, t, _, a, b in h["layout"][:1]]
    return restream(stream, secret, layer0=layer0, n_layers=n_layers, layout=layout)
