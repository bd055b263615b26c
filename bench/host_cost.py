"""bench/host_cost.py: host cost of one call, in one process: kforge through the binding and
through kf_attn_run alone, against PyTorch SDPA (cuDNN backend), decode B32 32/8 D128 8K.

python bench/host_cost.py   (needs torch with CUDA and KFORGE_LIB; prints medians in us)
"""
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kforge


def host_us(fn, n=5000, drain=200):
    v = []
    for i in range(n):
        if i % drain == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        v.append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    return statistics.median(v)


def main():
    B, HQ, HKV, D, S = 32, 32, 8, 128, 8192
    q = torch.randn(B, 1, HQ, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, S, HKV, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    ctx = kforge.Context()
    call = ctx.bind(q, k, v)
    plan, tensors, stream = call.plan, call.tensors, call.stream()
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        sdpa = host_us(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True))
    print(f"SDPA cuDNN call (PyTorch)             {sdpa:8.2f} us")
    print(f"kforge Call.run (Python binding)      {host_us(call.run):8.2f} us")
    print(f"kf_attn_run through ctypes alone      {host_us(lambda: plan.run(tensors, stream)):8.2f} us")


if __name__ == "__main__":
    main()
