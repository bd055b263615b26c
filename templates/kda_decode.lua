-- kda_decode.lua: KDA decode (one token per sequence; any length is handled in order): state slice in registers, read and written once
-- Launch: ipc 1: grid = (vsplit, hv, nseq), no dynamic shared memory; ipc > 1: grid = ceil(vsplit*hv*nseq / ipc),
-- each block loops over ipc items, prefetching the next state slice (dynamic shared memory, 16 B per row per
-- thread); block = 32*w threads; ws unused. See kda/decode.cuh.
local KL = import("lib/kda.lua")
local geom = KL.dec_geom

return {
  family   = "kda_decode",
  doc      = "Kimi Delta Attention decode: one block per (value-column slice, value head, sequence), state in registers",
  includes = { "common/kda_params.h", "common/types.cuh", "common/mma.cuh", "kda/common.cuh", "kda/decode.cuh",
               "lib/kda.lua" },
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
    return KL.dec_valid(p, f, dev)
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
  render   = function(p, f) return KL.dec_render(p, f) end,
  kernels  = function(p, f, dev)
    local g = geom(p, f)
    -- pdl: launched behind the previous kernel of the stream (KF_PDL_ENTRY first, common/types.cuh; kept on sm_90+)
    return { { name = "kf_kda_decode", threads = 32 * p.w, smem = (p.ipc or 1) > 1 and 16 * math.max(g.rk, g.rv) * g.t or 0,
               pdl = 1 } }
  end,
}
