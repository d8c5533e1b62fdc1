#!/usr/bin/env python3
"""compare_ckpt.py — are two ringgrad checkpoints (safetensors) the same within rounding?

    compare_ckpt.py A.ckpt B.ckpt [--rtol 1e-5] [--atol 0]

Every tensor of A must be in B with the same dtype and shape. Floating-point tensors
(F32, F64; F16/BF16 must be identical) may differ by |a - b| <= atol + rtol * max|a| of
that tensor; every other tensor (integers, bytes: steps, generator states, progress) and the
metadata must be identical. Prints the largest difference per float tensor that differs at
all, and "checkpoints match" or the tensors that do not. Plain python3, no numpy.
"""
import argparse
import array
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        tensors[name] = (info["dtype"], tuple(info["shape"]), body[a:b])
    return meta, tensors


def values(dtype, raw):
    code = {"F32": "f", "F64": "d"}[dtype]
    v = array.array(code)
    v.frombytes(raw)
    if sys.byteorder != "little":
        v.byteswap()
    return v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=0.0)
    args = p.parse_args()
    meta_a, ta = read(args.a)
    meta_b, tb = read(args.b)
    bad = []
    if meta_a != meta_b:
        keys = sorted(k for k in set(meta_a) | set(meta_b) if meta_a.get(k) != meta_b.get(k))
        bad.append("metadata differs: " + ", ".join(
            f"{k}: {meta_a.get(k)!r} vs {meta_b.get(k)!r}" for k in keys))
    if set(ta) != set(tb):
        bad.append(f"different tensors: only in A {sorted(set(ta) - set(tb))}, "
                   f"only in B {sorted(set(tb) - set(ta))}")
    worst = 0.0
    for name in sorted(set(ta) & set(tb)):
        da, sa, ra = ta[name]
        db, sb, rb = tb[name]
        if (da, sa) != (db, sb):
            bad.append(f"{name}: {da}{list(sa)} vs {db}{list(sb)}")
            continue
        if ra == rb:
            continue
        if da not in ("F32", "F64"):
            bad.append(f"{name}: {da} tensor differs (must be identical)")
            continue
        va, vb = values(da, ra), values(db, rb)
        scale = max((abs(x) for x in va), default=0.0)
        diff = max(abs(x - y) for x, y in zip(va, vb))
        rel = diff / scale if scale > 0 else diff
        worst = max(worst, rel)
        limit = args.atol + args.rtol * scale
        print(f"  {name}: {da}{list(sa)} max |a-b| = {diff:.3g} ({rel:.3g} of max |a| {scale:.3g})"
              f"{'' if diff <= limit else '  > ' + format(limit, '.3g')}")
        if diff > limit:
            bad.append(f"{name}: max |a-b| = {diff:.3g} > {limit:.3g}")
    if bad:
        print("checkpoints differ:\n  " + "\n  ".join(bad))
        return 1
    print(f"checkpoints match ({len(ta)} tensors; largest relative difference {worst:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
