-- kda_decode.lua: KDA decode (one token per sequence; any length is handled in order): state slice in registers, read and written once
-- Launch: ipc 1: grid = (vsplit, hv, nseq), no dynamic shared memory; ipc > 1: grid = ceil(vsplit*hv*nseq / ipc),
-- each block loops over ipc items, prefetching the next state slice (dynamic shared memory, 16 B per row per
-- thread); block = 32*w threads; ws unused. See kda/decode.cuh.
local function geom(p, f)
  local vc = f.dv // p.vsplit
  local t = 32 * p.w
  local g = { vc = vc, t = t, tprk = vc // 4, tprv = f.dk // 4 }
  g.rgk = t // g.tprk
  g.rgv = t // g.tprv
  g.rk = f.dk // math.max(g.rgk, 1)
  g.rv = vc // math.max(g.rgv, 1)
  return g
end

return {
  family   = "kda_decode",
  doc      = "Kimi Delta Attention decode: one block per (value-column slice, value head, sequence), state in registers",
  includes = { "common/kda_params.h", "common/types.cuh", "common/mma.cuh", "kda/common.cuh", "kda/decode.cuh" },
  shape    = { n = "int", t = "int", h = "int", hv = "int", dk = "int", dv = "int" },
  -- vsplit: value-column slices per (sequence, head); w: warps per block; ipc: items (slice, head,
  -- sequence) per block, > 1 keeps the next state slice in flight while one computes
  params   = { vsplit = { 1, 2, 4 }, w = { 4, 8 }, ipc = { 1, 4 } },
  fixed    = function(shape) return { dk = shape.dk, dv = shape.dv } end,
  valid    = function(p, f, dev)
    if f.dk ~= 64 and f.dk ~= 128 then return false, "dk must be 64 or 128, got " .. f.dk end
    if f.dv ~= 64 and f.dv ~= 128 then return false, "dv must be 64 or 128, got " .. f.dv end
    local g = geom(p, f)
    if g.vc % 4 ~= 0 or g.tprk > g.t or g.t % g.tprk ~= 0 then return false, "value slice " .. g.vc .. " does not tile the block" end
    if f.dk % g.rgk ~= 0 or g.rk < 1 then return false, "K-first: " .. g.rgk .. " row groups do not divide dk" end
    if g.t % g.tprv ~= 0 or g.vc % g.rgv ~= 0 or g.rv < 1 then
      return false, "V-first: " .. g.rgv .. " row groups do not divide the slice of " .. g.vc
    end
    if math.max(g.rk, g.rv) > 16 then return false, "more than 16 state rows per thread (register pressure)" end
    if (p.ipc or 1) > 1 then
      if math.max(g.rk, g.rv) < 2 then return false, "ipc > 1 with one state row per thread (little to prefetch; NVRTC spills)" end
      if 16 * math.max(g.rk, g.rv) * g.t > dev.smem_optin then return false, "prefetch buffer > smem_optin" end
    end
    return true
  end,
  default  = function(shape, dev)
    -- From the tuner on an H200 (2026-11-29): vsplit 2, w 4, ipc 4 (four items per block, the next
    -- state slice prefetched) won N128 H32 (0.151 ms, x1.06 over vsplit 1 w 8) and N32 HV32 (0.044 ms);
    -- with fewer (n, hv) items than SMs, slice the value columns further and take one item per block.
    local ctas = shape.n * shape.hv
    if ctas >= dev.sms then return { vsplit = 2, w = 4, ipc = 4 } end
    return { vsplit = 4, w = 4, ipc = 1 }
  end,
  render   = function(p, f)
    return subst("#define KF_BF16 1\n#define KF_KDA_K ${dk}\n#define KF_KDA_V ${dv}\n#define KF_DEC_THREADS ${t}\n#define KF_DEC_VSPLIT ${vs}\n#define KF_DEC_IPC ${ipc}\n",
                 { dk = f.dk, dv = f.dv, t = 32 * p.w, vs = p.vsplit, ipc = p.ipc or 1 })
      .. fragment("common/kda_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n"
      .. fragment("common/mma.cuh") .. "\n" .. fragment("kda/common.cuh") .. "\n" .. fragment("kda/decode.cuh")
  end,
  kernels  = function(p, f, dev)
    local g = geom(p, f)
    return { { name = "kf_kda_decode", threads = 32 * p.w, smem = (p.ipc or 1) > 1 and 16 * math.max(g.rk, g.rv) * g.t or 0 } }
  end,
}
