-- attn_naive.lua: plain GQA attention forward (fp32 math, no tensor cores), the tuner's fast reference
-- Launch: grid = (sq, hq, b) (sq = max query rows per sequence when packed), block = threads,
-- no dynamic shared memory; splits/ws_* are ignored. See attn/naive.cuh.
local function dtype_ok(dt) return dt == "bf16" or dt == "fp16" end

return {
  family   = "attn_naive",
  doc      = "naive GQA attention forward, one block per (row, head, sequence), fp32 two-pass softmax: fast reference",
  includes = { "common/attn_params.h", "common/types.cuh", "attn/naive.cuh" },
  shape    = { dtype = "string", b = "int", sq = "int", skv = "int", hq = "int", hkv = "int",
               d = "int", causal = "int" },
  params   = { threads = { 128 } },
  fixed    = function(shape) return { dtype = shape.dtype, d = shape.d, causal = shape.causal } end,
  valid    = function(p, f, dev)
    if not dtype_ok(f.dtype) then return false, "dtype must be bf16 or fp16, got " .. tostring(f.dtype) end
    if f.d < 1 or f.d > 1024 then return false, "d must be in [1, 1024], got " .. f.d end
    if f.causal ~= 0 and f.causal ~= 1 then return false, "causal must be 0 or 1, got " .. f.causal end
    if p.threads % 32 ~= 0 or p.threads < 32 or p.threads > 1024 then
      return false, "threads must be a multiple of 32 in [32, 1024], got " .. p.threads
    end
    return true
  end,
  default  = function(shape, dev) return { threads = 128 } end,
  render   = function(p, f)
    return subst("#define KF_BF16 ${bf16}\n#define KF_NAIVE_D ${d}\n#define KF_NAIVE_CAUSAL ${causal}\n"
                 .. "#define KF_NAIVE_THREADS ${threads}\n",
                 { bf16 = (f.dtype == "bf16") and 1 or 0, d = f.d, causal = f.causal, threads = p.threads })
      .. fragment("common/attn_params.h") .. "\n"
      .. fragment("common/types.cuh") .. "\n"
      .. fragment("attn/naive.cuh")
  end,
  kernels  = function(p, f, dev)
    return { { name = "kf_attn_naive", threads = p.threads, smem = 0 } }
  end,
}
