-- kda_decode.lua: KDA decode (one token per sequence; any length is handled in order): state slice in registers, read and written once
-- Launch: ipc 1: grid = (vsplit, hv, nseq), no dynamic shared memory; ipc > 1: grid = ceil(vsplit*hv*nseq / ipc),
-- each block loops over ipc items, prefetching the next state slice (dynamic shared memory, 16 B per row per
-- thread); block = 32*w threads; ws unused. See kda/decode.cuh.
local function geom(p, f)
  local vc = f.dv // p.vsplit
  local t = 32 * p.w
  local g = { vc = vc, t = t, tprk = vc // 4, tprv = f.dk // 4 }
  g.rgk = t // g.tprk
  if (p.ws or 0) == 1 then               -- warp slices: VC/w columns per warp, its rows over the lanes
    g.vcw = vc // p.w
    g.tprk = g.vcw // 4
    g.rgk = g.tprk >= 1 and 32 // g.tprk or 0
  end
  g.rgv = t // g.tprv
  g.rk = f.dk // math.max(g.rgk, 1)
  g.rv = vc // math.max(g.rgv, 1)
  -- ws 1, ipc 1: ask for the occupancy the state allows at 4 R + 48 registers a thread (R 16, 128
  -- threads: 4 blocks; R 8: 6; R 4: 9); tighter bounds spilled under NVRTC 13 (4 R + 32: 36-172 B)
  g.minb = 1
  if (p.ws or 0) == 1 and (p.ipc or 1) == 1 then
    local r = math.max(g.rk, g.rv, 1)
    g.minb = math.max(1, math.min(16, 65536 // (t * (4 * r + 48))))
  end
  return g
end

return {
  family   = "kda_decode",
  doc      = "Kimi Delta Attention decode: one block per (value-column slice, value head, sequence), state in registers",
  includes = { "common/kda_params.h", "common/types.cuh", "common/mma.cuh", "kda/common.cuh", "kda/decode.cuh" },
  shape    = { n = "int", t = "int", h = "int", hv = "int", dk = "int", dv = "int" },
  -- vsplit: value-column slices per (sequence, head); w: warps per block; ipc: items (slice, head,
  -- sequence) per block, > 1 keeps the next state slice in flight while one computes
  -- ws 1: K-first state in warp slices (each warp owns VC/w value columns over all K rows; k reductions
  -- are shuffles, one barrier per token), ws 0: block-wide row groups reduced through shared memory
  params   = { vsplit = { 1, 2, 4, 8 }, w = { 4, 8 }, ipc = { 1, 4 }, ws = { 1, 0 } },
  fixed    = function(shape) return { dk = shape.dk, dv = shape.dv } end,
  valid    = function(p, f, dev)
    if f.dk ~= 64 and f.dk ~= 128 then return false, "dk must be 64 or 128, got " .. f.dk end
    if f.dv ~= 64 and f.dv ~= 128 then return false, "dv must be 64 or 128, got " .. f.dv end
    local g = geom(p, f)
    if (p.ws or 0) == 1 then
      if g.vc % p.w ~= 0 or g.vcw % 4 ~= 0 or g.tprk < 1 or g.tprk > 32 or 32 % g.tprk ~= 0 then
        return false, "ws 1: a warp's " .. g.vc / p.w .. " value columns are not a power-of-two number of 4-column quads"
      end
    end
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
    -- ws 1 (2026-11-30; bench/NOTES.md "KDA decode at the bandwidth limit"): the state streams through
    -- registers like a copy; every block loads its whole slice (16-byte streaming loads) before anything
    -- else and stores it at its end, so the memory pipe never waits on a barrier chain. What is in flight
    -- an SM is what the registers hold, so the slice is as wide as 16 rows a thread allow.
    -- Revert: DECODE_WS = 0 gives the tuned ws 0 defaults.
    local DECODE_WS = 1
    local ctas = shape.n * shape.hv
    if DECODE_WS == 1 then
      -- the widest slice with at most 16 state rows a thread (dk 128: vsplit 2, 128 registers, 4 blocks
      -- of 128 threads an SM: 256 B of state in flight a thread, 128 KB an SM), narrower while there are
      -- fewer than 4 blocks an SM (value slice >= 16). The tuner on an H200 (2026-12-02, sustained,
      -- interleaved): vsplit 2 over the old rule's vsplit 4 (<= 8 rows, 6 blocks an SM, 96 KB in flight)
      -- x1.141 at N128 H32, x1.119 at N32 H32, x1.156 at N512 H16.
      local f = { dk = shape.dk, dv = shape.dv }
      local vsplit = 1
      while vsplit < 8 do
        local g = geom({ vsplit = vsplit, w = 4, ws = 1 }, f)
        if math.max(g.rk, g.rv) <= 16 then break end
        vsplit = vsplit * 2
      end
      while vsplit < 8 and shape.dv // (2 * vsplit) >= 16 and vsplit * ctas < 4 * dev.sms do vsplit = vsplit * 2 end
      return { vsplit = vsplit, w = 4, ipc = 1, ws = 1 }
    end
    if ctas >= dev.sms then return { vsplit = 2, w = 4, ipc = 4, ws = 0 } end
    return { vsplit = 4, w = 4, ipc = 1, ws = 0 }
  end,
  render   = function(p, f)
    return subst("#define KF_BF16 1\n#define KF_KDA_K ${dk}\n#define KF_KDA_V ${dv}\n#define KF_DEC_THREADS ${t}\n#define KF_DEC_VSPLIT ${vs}\n#define KF_DEC_IPC ${ipc}\n#define KF_DEC_WS ${ws}\n#define KF_DEC_MINB ${minb}\n",
                 { dk = f.dk, dv = f.dv, t = 32 * p.w, vs = p.vsplit, ipc = p.ipc or 1, ws = p.ws or 0, minb = geom(p, f).minb })
      .. fragment("common/kda_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n"
      .. fragment("common/mma.cuh") .. "\n" .. fragment("kda/common.cuh") .. "\n" .. fragment("kda/decode.cuh")
  end,
  kernels  = function(p, f, dev)
    local g = geom(p, f)
    return { { name = "kf_kda_decode", threads = 32 * p.w, smem = (p.ipc or 1) > 1 and 16 * math.max(g.rk, g.rv) * g.t or 0 } }
  end,
}
