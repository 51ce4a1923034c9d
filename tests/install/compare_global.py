"""compare_global.py OUT.safetensors VALUES.txt: the example's printed global
embedding (one value per line) equals the `global` tensor `ringvit embed` wrote,
within 1e-6 (the example prints 9 significant digits)."""
import json
import struct
import sys

import numpy as np

with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
t = header["global"]
want = np.frombuffer(data[t["data_offsets"][0]:t["data_offsets"][1]], dtype="<f4")
got = np.loadtxt(sys.argv[2], dtype=np.float64, ndmin=1)
if got.shape != want.shape:
    sys.exit(f"compare_global: {got.shape[0]} values printed, the embed output has {want.shape[0]}")
err = float(np.max(np.abs(got - want)))
if not err <= 1e-6:
    sys.exit(f"compare_global: the example's global embedding differs from embed's by {err:g}")
print(f"compare_global: {want.shape[0]} values equal embed --cp 2 within {err:.1e}")
