"""fla chunk_kda timed as issue 17 measured it (triton do_bench, L2 cleared, median), two gate forms, T 8192 H 16 / 64.

A cross-check of the harness's fla figures (bench/RESULTS.md, session 10). Needs fla 0.6.0 (the wheels under .whl/,
installed with pip --no-index --target) and a GPU: PYTHONPATH=/tmp/site python3 bench/experiments/fla_kda_dobench.py
"""
import os

import torch

os.environ.setdefault("FLA_TENSOR_CACHE_SIZE", "100000")
from fla.ops.kda import chunk_kda  # noqa: E402
from triton.testing import do_bench  # noqa: E402


def main():
    torch.manual_seed(0)
    dev = "cuda"
    for H in (16, 64):
        T, K = 8192, 128
        q, k, v = (torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16) for _ in range(3))
        graw = torch.randn(1, T, H, K, device=dev, dtype=torch.float32)
        braw = torch.randn(1, T, H, device=dev, dtype=torch.float32)
        A_log = torch.log(torch.rand(H, device=dev) * 15 + 1)
        dt_bias = (torch.randn(H * K, device=dev) * 0.1).contiguous()
        h0 = torch.randn(1, H, K, K, device=dev, dtype=torch.float32) * 0.1
        glog = (-5.0 * torch.sigmoid(A_log.exp().view(H, 1) * (graw + dt_bias.view(H, K)))).contiguous()
        beta = torch.sigmoid(braw).contiguous()

        def in_kernel():  # the harness's call (bench/harness.py, KdaFlaContender)
            return chunk_kda(q, k, v, graw, braw, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, use_gate_in_kernel=True,
                             lower_bound=-5.0, A_log=A_log, dt_bias=dt_bias, safe_gate=True)

        def log_space():
            return chunk_kda(q, k, v, glog, beta, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=True)

        for name, f in (("gate in kernel, safe_gate (the harness's call)", in_kernel),
                        ("log-space g and beta precomputed", log_space)):
            with torch.inference_mode():
                f()
                f()
                torch.cuda.synchronize()
                ms = [do_bench(f, warmup=200, rep=1000, return_mode="median") for _ in range(2)]
            print(f"fla chunk_kda T{T} H{H} {name}: do_bench median {ms[0]:.4f} ms, again {ms[1]:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
