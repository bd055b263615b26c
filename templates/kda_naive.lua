-- kda_naive.lua: plain KDA token recurrence (fp32, state in shared memory), one block per (value head, sequence): the tuner's fast reference
-- Launch: grid = (hv, nseq, 1), block = dv threads, dynamic shared memory dk*dv*4 (the state); ws unused. See kda/naive.cuh.
return {
  family   = "kda_naive",
  doc      = "naive Kimi Delta Attention recurrence, one block per (value head, sequence), fp32: fast reference",
  includes = { "common/kda_params.h", "common/types.cuh", "kda/common.cuh", "kda/naive.cuh" },
  -- n sequences of t tokens (typical), h q/k heads, hv value heads, dk/dv head dims
  shape    = { n = "int", t = "int", h = "int", hv = "int", dk = "int", dv = "int" },
  params   = { threads = { 0 } },      -- block = dv threads; one point so the space is not empty
  fixed    = function(shape) return { dk = shape.dk, dv = shape.dv } end,
  valid    = function(p, f, dev)
    if f.dk < 1 or f.dk > 256 then return false, "dk must be in [1, 256], got " .. f.dk end
    if f.dv < 64 or f.dv > 1024 or f.dv % 32 ~= 0 then
      return false, "dv must be a multiple of 32 in [64, 1024], got " .. f.dv
    end
    if f.dk * f.dv * 4 > dev.smem_optin then return false, "state " .. f.dk * f.dv * 4 .. " bytes > " .. dev.smem_optin end
    return true
  end,
  default  = function(shape, dev) return { threads = 0 } end,
  render   = function(p, f)
    return subst("#define KF_BF16 1\n#define KF_KDA_K ${dk}\n#define KF_KDA_V ${dv}\n", { dk = f.dk, dv = f.dv })
      .. fragment("common/kda_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n"
      .. fragment("kda/common.cuh") .. "\n" .. fragment("kda/naive.cuh")
  end,
  kernels  = function(p, f, dev)
    return { { name = "kf_kda_naive", threads = f.dv, smem = f.dk * f.dv * 4 } }
  end,
}
