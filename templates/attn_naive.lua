-- attn_naive.lua: plain GQA attention forward (fp32 math, no tensor cores), the tuner's fast reference
-- Launch: grid = (sq, hq, b) (sq = max query rows per sequence when packed), block = threads,
-- no dynamic shared memory; splits/ws_* are ignored. See attn/naive.cuh.
-- The model features of attn_prefill / attn_decode (window, softcap, sinks, FP8 K/V: lib/attn.lua) are optional
-- shape keys and fixed values here too, so the naive kernel gates feature shapes; a plain shape has the fixed
-- values, the defines and so the binary of before.
local A = import("lib/attn.lua")

return {
  family   = "attn_naive",
  doc      = "naive GQA attention forward, one block per (row, head, sequence), fp32 two-pass softmax: fast reference; window, softcap, sinks, FP8 K/V",
  includes = { "lib/attn.lua", "common/attn_params.h", "common/types.cuh", "common/fp8.cuh", "common/attn_features.cuh",
               "attn/naive.cuh" },
  shape    = A.gqa_shape(),
  params   = { threads = { 128 } },
  fixed    = function(shape)
    return A.feature_fixed(shape, { dtype = shape.dtype, d = shape.d, causal = shape.causal })
  end,
  valid    = function(p, f, dev)
    if not A.dtype_ok(f.dtype) then return false, "dtype must be bf16 or fp16, got " .. tostring(f.dtype) end
    if f.d < 1 or f.d > 1024 then return false, "d must be in [1, 1024], got " .. f.d end
    if f.causal ~= 0 and f.causal ~= 1 then return false, "causal must be 0 or 1, got " .. f.causal end
    local ok, why = A.check_features(f, true)
    if not ok then return false, why end
    if p.threads % 32 ~= 0 or p.threads < 32 or p.threads > 1024 then
      return false, "threads must be a multiple of 32 in [32, 1024], got " .. p.threads
    end
    return true
  end,
  default  = function(shape, dev) return { threads = 128 } end,
  render   = function(p, f)
    return A.feature_defines(f)
      .. subst("#define KF_BF16 ${bf16}\n#define KF_NAIVE_D ${d}\n#define KF_NAIVE_CAUSAL ${causal}\n"
               .. "#define KF_NAIVE_THREADS ${threads}\n",
               { bf16 = A.bf16(f), d = f.d, causal = f.causal, threads = p.threads })
      .. A.fragments_kv(f, { "common/attn_params.h", "common/types.cuh", "common/attn_features.cuh", "attn/naive.cuh" })
  end,
  kernels  = function(p, f, dev)
    return { { name = "kf_attn_naive", threads = p.threads, smem = 0 } }
  end,
}
