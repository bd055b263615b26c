"""bench/mla_torch.py: the floor for absorbed-MLA decode: an eager PyTorch implementation, checked
against fp64 then timed like the harness (L2 flushed before each sample, CUDA events, median).

python -m bench.mla_torch [--batch 128] [--keys 4096] [--heads 16 128] [--samples 30]

One latent KV head per sequence: cache [B, S, 576] (512 latent + 64 rope), q [B, Sq, Hq, 576],
score = scale * q . k over the 576 values, o = softmax(score) @ cache[..., :512]  ([B, Sq, Hq, 512]).
Prints one markdown row per head count: time, cache bytes read per second, and FLOP/s counted as
2 * Sq * sum(Skv) * Hq * (576 + 512), the issue's convention.
"""
import argparse
import math
import statistics

import torch

from .harness import Timer, _elapsed

DK, DV = 576, 512


def eager(q, cache, scale):
    """q [B, Sq, Hq, 576] bf16, cache [B, S, 576] bf16 -> o [B, Sq, Hq, 512] bf16, lse [B, Hq, Sq] fp32."""
    s = torch.einsum("bqhd,bkd->bhqk", q, cache).float() * scale
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).to(cache.dtype)
    o = torch.einsum("bhqk,bkd->bqhd", p, cache[..., :DV])
    return o, lse


def reference(q, cache, scale, rows):
    """fp64 o of the first `rows` sequences."""
    qd, cd = q[:rows].double(), cache[:rows].double()
    s = torch.einsum("bqhd,bkd->bhqk", qd, cd) * scale
    return torch.einsum("bhqk,bkd->bqhd", torch.softmax(s, dim=-1), cd[..., :DV])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--sq", type=int, default=1)
    ap.add_argument("--heads", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--samples", type=int, default=30)
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    timer = Timer(dev, max(2 * l2, 128 << 20), 0)
    print(f"| MLA decode B{a.batch} Skv {a.keys} Sq {a.sq} (eager PyTorch, bf16) | median ms | cache TB/s | TFLOP/s | rel err vs fp64 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for hq in a.heads:
        cache = torch.randn(a.batch, a.keys, DK, device=dev, dtype=torch.bfloat16)
        q = torch.randn(a.batch, a.sq, hq, DK, device=dev, dtype=torch.bfloat16)
        scale = 1.0 / math.sqrt(DK)
        o, _ = eager(q, cache, scale)
        ref = reference(q, cache, scale, 4)
        err = float((o[:4].double() - ref).norm() / ref.norm())
        if not err <= 1e-2:
            print(f"| Hq {hq} | — | — | — | WRONG: {err:.2e} |")
            continue
        for _ in range(3):
            eager(q, cache, scale)
        ms = statistics.median(_elapsed(timer.time(lambda: eager(q, cache, scale), a.samples)))
        cache_bytes = a.batch * a.keys * DK * 2
        flops = 2.0 * a.sq * a.batch * a.keys * hq * (DK + DV)
        print(f"| Hq {hq} | {ms:.4f} | {cache_bytes / ms / 1e9:.2f} | {flops / ms / 1e9:.1f} | {err:.1e} |")
        del cache, q, o
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
