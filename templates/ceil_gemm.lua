-- ceil_gemm.lua: kforge's own bf16 GEMM (mma.sync, cp.async, ldmatrix): the compute ceiling `kforge doctor --measure` records (not cuBLAS)
return {
  family   = "ceil_gemm",
  doc      = "bf16 GEMM C = A B^T (A [M,K], B [N,K], C [M,N]), fp32 accumulate: kforge's own mma.sync kernel for the measured ceiling",
  includes = { "common/types.cuh", "common/mma.cuh", "ceil/gemm.cuh" },
  shape    = { m = "int", n = "int", k = "int" },
  -- wm: warps along M of the 8 (2: 64x32 warp tiles, 4: 32x64); stages: cp.async depth
  params   = { wm = { 2, 4 }, stages = { 2, 3, 4 } },
  fixed    = function(shape) return { dtype = "bf16" } end,
  valid    = function(p, f, dev)
    if dev.cc < 80 then return false, "mma.sync bf16 needs sm_80 or newer" end
    local smem = p.stages * (128 + 128) * 32 * 2
    if smem > dev.smem_optin then return false, "shared memory " .. smem .. " > " .. dev.smem_optin end
    return true
  end,
  default  = function(shape, dev) return { wm = 2, stages = 3 } end,
  render   = function(p, f)
    return subst("#define KF_BF16 1\n#define KF_WM ${wm}\n#define KF_STAGES ${stages}\n", p)
      .. fragment("common/types.cuh") .. "\n" .. fragment("common/mma.cuh") .. "\n" .. fragment("ceil/gemm.cuh")
  end,
  kernels  = function(p, f, dev)
    return { { name = "kf_ceil_gemm", threads = 256, smem = p.stages * (128 + 128) * 32 * 2 } }
  end,
}
