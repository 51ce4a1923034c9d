"""compare_outputs.py A.safetensors B.safetensors: two embed outputs hold the same
tensors (names, dtypes, shapes, bytes: tolerance 0) and the same metadata. The C
example (embed_two_ranks) must write exactly what `ringvit embed --cp 2` writes,
times on the container's clock included."""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    return {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}, meta


a, ma = load(sys.argv[1])
b, mb = load(sys.argv[2])
bad = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
bad += [f"metadata {k}" for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)]
if bad:
    sys.exit(f"compare_outputs: {sys.argv[1]} and {sys.argv[2]} differ in: {', '.join(bad)}")
print(f"compare_outputs: {len(a)} tensors and {len(ma)} metadata entries equal")
