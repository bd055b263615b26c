-- attn_prefill.lua: GQA flash-attention forward (prefill): BM query rows of one head per CTA, native GQA, causal/varlen

-- impl "mma": attn/fwd.cuh (FA2 style, mma.sync, any sm_80+). impl "wgmma" / "wgmma_ov": attn/fwd_sm90.cuh
-- (Hopper sm_90a: wgmma, a cp.async producer warpgroup and two consumer warpgroups of 64 rows, mbarrier
-- pipeline; "wgmma_ov" also overlaps each block's softmax with the previous block's P V, "wgmma_pp" adds
-- FA3's pingpong: the two consumers take turns issuing GEMMs); for them bm = 128 and w = 8 are the two
-- consumer warpgroups (8 warps of 16 rows), bn = 128 (64 at head dim 256, or 80 on wgmma_tma: its default there),
-- stages 2 or 3; head dim 64, 128 or 256.
-- The default takes WGMMA_DEFAULT where it is valid (sm_90a, head dim 64, 128 or 256), "mma" elsewhere. Measured
-- on the H200 (2026-11-29, bf16 causal 32/8, kforge run, L2 flushed): D128 16K: mma 339 TFLOP/s, wgmma 522 (stages
-- 3: 536), wgmma_ov 583 (562), wgmma_pp 585 (575); D64 8K: mma 296, wgmma 340, wgmma_ov 359 (347), wgmma_pp 403
-- (399); D256 4K (bn 64, stages 2): mma 255, wgmma 505, wgmma_ov 509, wgmma_pp 519. Every impl passes the GPU
-- suite (test_attn_gpu, 168 cases with the D64 and D256 ones). "wgmma_tma" (issue 19): wgmma_pp's consumers with a
-- copy-engine producer (one lane of one warp issues cp.async.bulk.tensor by tensor maps the host encodes per call,
-- runtime/attn_tmap.c); paged K/V by a map over each page pool (boxes of min(bn, page) rows) where the page size
-- allows (session 7; else the default is wgmma_pp and a plan of wgmma_tma is refused: runtime/plan_attn.c). The default since
-- 2026-12-01 (H200, sustained, interleaved with wgmma_pp, 2 rounds: D128 16K 1.103x, D256 4K 1.106x, D64 8K
-- 1.018x, D128 4K 1.077x; bench/RESULTS.md, session 6).
local A = import("lib/attn.lua")
local WGMMA_DEFAULT = "wgmma_tma"
local function is_wgmma(impl) return impl == "wgmma" or impl == "wgmma_ov" or impl == "wgmma_pp" or impl == "wgmma_tma" end

local function shape_of(p, f)
  if is_wgmma(p.impl) then
    -- Q + stages x (K + V), 1024 bytes of alignment slack, 8-byte mbarriers (q; full_k, full_v, empty_k, empty_v per
    -- stage; q empty), the cp.async producer's page table of a paged block (8 bytes a key)
    local smem = p.bm * f.d * 2 + p.stages * 2 * p.bn * f.d * 2 + 1024 + 8 * (2 + 4 * p.stages)
    if p.impl ~= "wgmma_tma" then smem = smem + 8 * p.bn end
    return { smem = smem, threads = 128 * (1 + p.bm // 64) }
  end
  local wm, wn = p.w, 1
  local mt = p.bm // (16 * wm)
  local qreg = (mt * f.d <= 128) and 1 or 0
  local smem = p.bm * f.d * 2 + p.stages * 2 * p.bn * f.d * 2
  if f.kv then smem = p.bm * f.d * 2 + p.stages * 2 * p.bn * f.d + p.bn * f.d * 2 end   -- fp8 stages + one 16-bit tile (K, then V)
  return { wm = wm, wn = wn, mt = mt, qreg = qreg, smem = smem, threads = 32 * p.w }
end

local function valid_wgmma(p, f, dev)
  if dev.arch ~= "sm_90a" then return false, "impl " .. p.impl .. " needs the sm_90a target, got " .. tostring(dev.arch) end
  if f.d ~= 64 and f.d ~= 128 and f.d ~= 256 then
    return false, "impl wgmma supports head dims 64, 128 and 256, got " .. tostring(f.d)
  end
  -- bm 192 (three consumer warpgroups, w 12): FlashAttention-3's tile at head dim 64, where the exponentials take
  -- as many cycles as the GEMMs; 160 registers a consumer hold O, S and P only there, and only the TMA producer
  -- lives in the 32 registers left to it
  if p.bm == 192 then
    if p.impl ~= "wgmma_tma" or f.d ~= 64 or p.w ~= 12 then
      return false, "bm 192 is impl wgmma_tma's tile at head dim 64 with w 12 (three consumer warpgroups), got impl "
                    .. p.impl .. ", head dim " .. f.d .. ", w " .. p.w
    end
  elseif p.bm ~= 128 or p.w ~= 8 then
    return false, "impl wgmma takes bm 128 and w 8 (two consumer warpgroups), or bm 192 and w 12 (wgmma_tma, head dim 64)"
  end
  -- O (64 x D) and S (64 x BN) fp32 per consumer warpgroup: 128 + 32 registers at D 256 with 64-key blocks; 80-key
  -- blocks there (FlashAttention-3's 128 x 80 tile: S 40, P 20 registers) on wgmma_tma, whose two stages fit 224 KB
  local bn = (f.d == 256) and 64 or 128
  if not (p.bn == bn or (f.d == 256 and p.bn == 80 and p.impl == "wgmma_tma")) then
    return false, "impl " .. p.impl .. " takes bn " .. bn .. " at head dim " .. f.d
                  .. (f.d == 256 and " (or 80 with impl wgmma_tma)" or "") .. ", got " .. p.bn
  end
  if p.stages < 2 then return false, "impl wgmma needs 2 or 3 stages" end
  -- sched persist: grid = min(units of two tiles, SMs), each CTA loops over units (its producer warp reloads Q per tile)
  if p.sched == "persist" and p.impl ~= "wgmma_tma" then
    return false, "sched persist is impl wgmma_tma's (its one-warp producer reloads Q per tile), got impl " .. p.impl
                  .. " (name sched=grid with it)"
  end
  return A.check_smem(shape_of(p, f).smem, dev)
end

local function valid(p, f, dev)
  local ok, why = A.check_fixed(f, true)
  if not ok then return false, why end
  ok, why = A.check_features(f, not is_wgmma(p.impl))
  if not ok then return false, why end
  if f.kv and p.stages < 2 then return false, "FP8 K/V needs 2 or more stages" end
  if is_wgmma(p.impl) then return valid_wgmma(p, f, dev) end
  if p.bm > 128 or p.w > 8 then return false, "impl mma takes bm 64 or 128 and w 4 or 8" end
  if p.bn == 80 then return false, "bn 80 is impl wgmma_tma's at head dim 256" end
  if p.sched == "persist" then return false, "impl mma takes sched grid (one CTA a tile), got sched persist" end
  if p.bm % (16 * p.w) ~= 0 then return false, "bm must be a multiple of 16 * warps" end
  local s = shape_of(p, f)
  -- fp32 registers per thread: O acc MT*D/2, S acc MT*BN/2, Q fragments MT*D/4 when held in registers
  local regs = s.mt * (f.d // 2 + p.bn // 2 + s.qreg * f.d // 4) + 40
  if regs > 240 then return false, "register estimate " .. regs .. " > 240 (spills)" end
  -- seen spilling with nvcc 13.0 (bench/dev/compile_all.sh): two m tiles per warp above D 64, 128-key blocks at D 256
  if s.mt > 1 and f.d > 64 then return false, "bm/(16 w) > 1 m tiles per warp spills above head dim 64" end
  if f.d >= 256 and p.bn > 64 then return false, "bn > 64 spills at head dim 256" end
  return A.check_smem(s.smem, dev)
end

return {
  family   = "attn_prefill",
  doc      = "GQA attention forward for prefill (mma.sync FA2-style, or wgmma on sm_90a), causal bottom-right, varlen, strided or paged K/V; sliding window, softcap, sinks, FP8 K/V (mma)",
  includes = { "lib/attn.lua", "common/attn_params.h", "common/types.cuh", "common/fp8.cuh", "common/mma.cuh",
               "common/attn_features.cuh", "attn/fwd.cuh", "common/wgmma.cuh", "attn/fwd_sm90.cuh" },
  shape    = A.gqa_shape(),
  -- impl: kernel body; bm: query rows per CTA; w: warps (each 16*bm/(16w) rows); bn: keys per block; stages: K/V depth;
  -- sched: grid (a CTA a tile of bm rows of one head) or persist (wgmma_tma: min(units, SMs) CTAs looping over units of
  -- two tiles of one head, query blocks m and last - m, in L2-sized sections of heads; each CTA's next K and Q loaded
  -- under its current tile's last blocks)
  params   = { impl = { "mma", "wgmma", "wgmma_ov", "wgmma_pp", "wgmma_tma" }, bm = { 64, 128, 192 }, w = { 4, 8, 12 }, bn = { 32, 64, 80, 128 }, stages = { 1, 2, 3 },
               sched = { "grid", "persist" } },
  fixed    = A.gqa_fixed,
  valid    = valid,
  default  = function(shape, dev)
    -- measured on H200, causal 32/8 bf16, mma: D128 16K bm128 w8 bn128 st2 336 TFLOP/s (bn64 304);
    -- D64 8K bm128 w4 bn64 268 (w8 bn128 253); D256 4K bm128 w8 bn64 255 (bn32 st3 209). wgmma_pp: D128 585,
    -- D64 403, D256 (bn 64, the only key block whose O + S fit the consumers' registers) 0.529 ms = 519 TFLOP/s
    local fp8 = shape.kv_dtype ~= nil and shape.kv_dtype ~= shape.dtype
    if WGMMA_DEFAULT and dev.arch == "sm_90a" and (shape.d == 64 or shape.d == 128 or shape.d == 256)
       and A.dtype_ok(shape.dtype) and not fp8 then
      -- paged: the page map's boxes (min(bn, page) rows, a multiple of 8, bn and the page size multiples of one
      -- another: runtime/attn_tmap.c); other page sizes take wgmma_pp's cp.async producer
      local ps = shape.page_size or 0
      local function maps_ok(b) local pb = math.min(b, ps); return ps == 0 or (pb % 8 == 0 and (b % ps == 0 or ps % b == 0)) end
      -- head dim 256: 80-key blocks (FlashAttention-3's 128 x 80 tile) where the page maps take them (H200, session 21,
      -- kforge run, sustained, causal bf16: 32/8 4K 2.10 -> 2.01 / 2.03 ms, 16/16 8K 1.98 -> 1.89, 64/8 8 x 2K 2.49 ->
      -- 2.31 against bn 64), else 64
      local bn = shape.d ~= 256 and 128 or (maps_ok(80) and 80 or 64)
      local maps = maps_ok(bn)
      -- stages 3 at head dim 128 (wgmma_tma): the sustained, interleaved prefill sweep chose it on all six D128
      -- shapes, 1K..32K, x1.015..1.039 beyond a 1% band (H200, 2026-12-01, session 7's fourth call), and never
      -- found it slower; D64 (bm 128) kept stages 2 there, D256 has no room for a third stage
      -- head dim 64: the 192-row tile of three consumers, stages 3 (H200, sustained, kforge run, session 20: causal
      -- 32/8 8K 0.686 -> 0.636 ms, 8 x 2K 0.423 -> 0.416, 16/16 16K 1.281 -> 1.206 against bm 128 stages 2)
      local bm = (maps and shape.d == 64) and 192 or 128
      local st = (maps and (shape.d == 128 or shape.d == 64)) and 3 or 2
      -- sched grid: the persistent schedule measured slower on the long rows (H200, session 20, kforge run, causal:
      -- 32/8 16K 3.79 ms grid against 3.98 persist, 2 x 8K D 64 1.27 / 1.35, 8 x 2K D 256 16/16 0.62 / 0.71;
      -- only 8 x 2K D 64 0.430 / 0.421 the other way; bench/NOTES.md), a knob for the tuner
      return { impl = maps and WGMMA_DEFAULT or "wgmma_pp", bm = bm, w = bm // 16, bn = bn, stages = st, sched = "grid" }
    end
    if shape.d <= 64 then return { impl = "mma", bm = 128, w = 4, bn = 64, stages = 2, sched = "grid" } end
    if shape.d <= 128 then return { impl = "mma", bm = 128, w = 8, bn = 128, stages = 2, sched = "grid" } end
    -- D 256: the first whose tiles fit the device's shared memory (192 KB at bn 64 exceeds an sm_80's 163 KB)
    return A.first_valid(valid, A.gqa_fixed(shape), dev, { impl = "mma", bm = 128, w = 8, bn = 64, stages = 2, sched = "grid" },
                         { {}, { bn = 32 }, { bm = 64, w = 4, bn = 32 }, { bm = 64, w = 4, bn = 32, stages = 1 } })
  end,
  render   = function(p, f)
    if is_wgmma(p.impl) then
      local hdr = A.feature_defines(f) .. subst([[
#define KF_BF16 ${bf16}
#define KF_D ${d}
#define KF_G ${g}
#define KF_CAUSAL ${causal}
#define KF_BN ${bn}
#define KF_SM90_BM ${bm}
#define KF_SM90_PERSIST ${persist}
#define KF_STAGES ${stages}
#define KF_SM90_OVERLAP ${ov}
#define KF_SM90_PINGPONG ${pp}
#define KF_FWD_NAME kf_attn_prefill
]], { bf16 = A.bf16(f), d = f.d, g = f.g, causal = f.causal, bn = p.bn, bm = p.bm, stages = p.stages, persist = p.sched == "persist" and 1 or 0,
      ov = (p.impl ~= "wgmma") and 1 or 0, pp = (p.impl == "wgmma_pp" or p.impl == "wgmma_tma") and 1 or 0 })
      if p.impl == "wgmma_tma" then   -- only then: the other impls' sources stay byte for byte those of before
        hdr = "#define KF_ATTN_TMA 1\n#define KF_SM90_TMA 1\n" .. hdr
      end
      return hdr .. A.fragments({ "common/attn_params.h", "common/types.cuh", "common/mma.cuh", "common/wgmma.cuh",
                                  "common/attn_features.cuh", "attn/fwd_sm90.cuh" })
    end
    local s = shape_of(p, f)
    local hdr = A.feature_defines(f) .. A.fwd_defines(f, { decode = 0, tm = p.bm, bn = p.bn, wm = s.wm, wn = s.wn, stages = p.stages,
                                   qreg = s.qreg, name = "kf_attn_prefill" })
    return hdr .. A.fragments_kv(f, { "common/attn_params.h", "common/types.cuh", "common/mma.cuh",
                                      "common/attn_features.cuh", "attn/fwd.cuh" })
  end,
  kernels  = function(p, f, dev)
    local s = shape_of(p, f)
    return { { name = "kf_attn_prefill", threads = s.threads, smem = s.smem } }
  end,
}
