-- attn_parts_decode.lua: split-score decode (absorbed MLA; base + per-layer delta with a joint layer-group scan), paged KV, split-KV + combine
local A = import("lib/attn.lua")
local function up64(x) return cdiv(x, 64) * 64 end

-- "latent512_rope64" -> { {name = "latent", dim = 512}, {name = "rope", dim = 64} }, or nil, why
local function parse_parts(s)
  local parts = {}
  if type(s) ~= "string" then return nil, "parts must be a string" end
  for name, dim in string.gmatch(s, "([a-z]+)(%d+)") do
    parts[#parts + 1] = { name = name, dim = tonumber(dim) }
  end
  if #parts < 1 or #parts > 4 then return nil, "parts '" .. s .. "' must name 1..4 parts like latent512_rope64" end
  local back = {}
  for _, x in ipairs(parts) do back[#back + 1] = x.name .. x.dim end
  if table.concat(back, "_") ~= s then return nil, "parts '" .. s .. "' is not <name><dim> joined by _" end
  return parts
end

-- The layout of one variant: caches in tile order, chunk offsets, Q row layout, value map.
local function layout(f)
  local parts, why = parse_parts(f.parts)
  if not parts then return nil, why end
  local L = f.layers
  local lo = { parts = parts, caches = {}, kparts = {}, dq = 0 }
  local col8 = 0
  for p, x in ipairs(parts) do
    local per = (p > 1) and L or 1
    lo.kparts[p] = { q8 = lo.dq // 8, dim = x.dim, k8 = col8, ls8 = (p > 1) and (x.dim // 8) or 0 }
    for _ = 1, per do
      lo.caches[#lo.caches + 1] = { off8 = col8, dim = x.dim }
      col8 = col8 + x.dim // 8
    end
    lo.dq = lo.dq + x.dim
  end
  lo.vsegs = {}                 -- value row of a layer: { c16 start, c16 end, tile chunk of layer 0, chunks per layer }
  if f.value == "separate" then
    local c16 = 0
    for p, x in ipairs(parts) do
      local per = (p > 1) and L or 1
      lo.vsegs[#lo.vsegs + 1] = { c0 = c16, c1 = c16 + x.dim // 16, k8 = col8, ls8 = (p > 1) and (x.dim // 8) or 0 }
      for _ = 1, per do
        lo.caches[#lo.caches + 1] = { off8 = col8, dim = x.dim }
        col8 = col8 + x.dim // 8
      end
      c16 = c16 + x.dim // 16
    end
    lo.dv = lo.dq
  else
    local alias = string.match(f.value or "", "^alias_([a-z]+)$")
    if alias ~= parts[1].name then
      return nil, "value must be 'separate' or 'alias_" .. parts[1].name .. "' (the first key part), got '" .. tostring(f.value) .. "'"
    end
    lo.vsegs[1] = { c0 = 0, c1 = f.dv // 16, k8 = 0, ls8 = 0 }
    lo.dv = f.dv
  end
  lo.w = up64(col8 * 8)
  lo.dqp = up64(lo.dq)
  return lo
end

-- impl "wgmma" (parts/decode_sm90.cuh, sm_90a): 3 warpgroups; Q [64][DQ] | stages x tile [BN][W] | the S exchange
-- (2 parities x 2 consumers x 64 x BN fp32) | 1024 bytes of alignment slack | 8-byte mbarriers (q; full, empty per stage)
local function shape_wgmma(p, f, lo)
  local smem = 64 * lo.dq * 2 + p.stages * p.bn * lo.w * 2 + 4 * 64 * p.bn * 4 + 1024 + 8 * (1 + 2 * p.stages)
  return { threads = 384, smem = smem }
end

-- impl "wgmma_ks" (parts/decode_sm90_ks.cuh, sm_90a): 3 warpgroups; Q [64][DQ] | 2 slots x [64 keys][DQ] | row maxima
-- and sums (1024 bytes) | 13 mbarriers | 1024 bytes of alignment slack
local function shape_wgmma_ks(p, f, lo)
  return { threads = 384, smem = 3 * 64 * lo.dq * 2 + 1024 + 8 * 13 + 1024 }
end

local function is_ks(p) return p.impl == "wgmma_ks" or p.impl == "wgmma_ksl" or p.impl == "wgmma_tma" end

-- impl "wg8" (parts/decode_wg8.cuh, sm_90a, the FP8 latent cache on e4m3 wgmma): one warpgroup; 1024 bytes of
-- alignment slack | Q^T (KP panels of [2 tm][128 bytes]) | P^T ([2 tm][128 bytes]) | stages x (KP panels of
-- [64 keys][128 bytes] | 1024 bytes: the block's 64 scales) | row maxima [4 warps][tm] fp32 | the warps' largest
-- scales [4] fp32 | the stages' mbarriers, 8 bytes each; KP = ceil(dq / 128)
local function shape_wg8(p, f, lo)
  local kp = cdiv(lo.dq, 128)
  return { threads = 128, smem = 1024 + kp * 2 * p.tm * 128 + 2 * p.tm * 128 + p.stages * (kp * 64 * 128 + 1024)
                                 + 4 * p.tm * 4 + 16 + 8 * p.stages }
end

local function shape_of(p, f, lo)
  if p.impl == "wg8" then return shape_wg8(p, f, lo) end
  if p.impl == "wgmma" then return shape_wgmma(p, f, lo) end
  if is_ks(p) then return shape_wgmma_ks(p, f, lo) end
  local wm = p.tm // 16
  local threads = 32 * f.layers * wm * p.wn
  local q = f.layers * p.tm * lo.dqp * 2
  local tile = p.bn * lo.w * 2
  local pb = (p.wn > 1) and (f.layers * p.tm * (p.bn + 8) * 2) or 0
  local red = f.layers * p.tm * p.wn * 4
  -- FP8 latent cache (f.kv): one 16-bit tile the block in use is converted into, and per stage the block's e4m3
  -- bytes [BN][W] and its per-token scales [BN] fp32 (parts/decode.cuh, KF_KV8)
  local stages = f.kv and (tile + p.stages * (p.bn * lo.w + p.bn * 4)) or p.stages * tile
  return { threads = threads, smem = q + stages + pb + red, kw = p.bn // p.wn, dvw = lo.dv // p.wn }
end

-- The wgmma kernel's scope (absorbed MLA on Hopper): refuses the rest, naming the value.
local function valid_wgmma(p, f, lo, dev)
  if dev.arch ~= "sm_90a" then return false, "impl wgmma needs the sm_90a target, got " .. tostring(dev.arch) end
  if f.layers ~= 1 then return false, "impl wgmma takes layers 1, got " .. f.layers end
  if f.value == "separate" then return false, "impl wgmma needs value 'alias_" .. lo.parts[1].name .. "', got 'separate'" end
  if lo.dq % 64 ~= 0 then return false, "impl wgmma needs key columns " .. lo.dq .. " to be a multiple of 64" end
  -- each consumer's dv/2 value columns are whole 64-column swizzle panels (an MN-major wgmma B operand)
  if f.dv % 128 ~= 0 or f.dv > 512 then
    return false, "impl wgmma needs dv a multiple of 128 up to 512 (dv/2 whole 64-column panels, <= 256), got " .. f.dv
  end
  if p.tm ~= 64 then return false, "impl wgmma takes tm 64 (one wgmma row tile), got " .. p.tm end
  if p.wn ~= 1 then return false, "impl wgmma takes wn 1 (its two consumer warpgroups are fixed), got " .. p.wn end
  if p.bn ~= 32 and p.bn ~= 64 then return false, "impl wgmma takes bn 32 or 64, got " .. p.bn end
  if p.stages < 2 then return false, "impl wgmma needs 2 or more stages, got " .. p.stages end
  if p.tm > 2 * f.g then return false, "tm " .. p.tm .. " is taller than 2 x g = " .. 2 * f.g .. " rows" end
  if f.ps ~= 0 and f.ps % p.bn ~= 0 then
    return false, "impl wgmma needs page_size 0 or a multiple of bn " .. p.bn .. ", got " .. f.ps
  end
  return A.check_smem(shape_wgmma(p, f, lo).smem, dev)
end

-- The keys-split kernel's scope: absorbed MLA-like (value aliased, a key-only panel after the value for P).
-- Any head count: rows past g x sq are zero (memory-bound Hq 16 pads 16 rows to the 64 of a wgmma tile).
local function valid_wgmma_ks(p, f, lo, dev)
  if dev.arch ~= "sm_90a" then return false, "impl " .. p.impl .. " needs the sm_90a target, got " .. tostring(dev.arch) end
  if f.layers ~= 1 then return false, "impl " .. p.impl .. " takes layers 1, got " .. f.layers end
  if f.value == "separate" then return false, "impl " .. p.impl .. " needs value 'alias_" .. lo.parts[1].name .. "', got 'separate'" end
  if lo.dq % 64 ~= 0 then return false, "impl " .. p.impl .. " needs key columns " .. lo.dq .. " to be a multiple of 64" end
  if f.dv ~= 256 and f.dv ~= 512 then return false, "impl " .. p.impl .. " needs dv 256 or 512, got " .. f.dv end
  if lo.dq < f.dv + 64 then
    return false, "impl " .. p.impl .. " needs a key-only 64-column panel after the value (key columns " .. lo.dq .. " >= dv + 64)"
  end
  if p.tm ~= 64 then return false, "impl " .. p.impl .. " takes tm 64, got " .. p.tm end
  if p.wn ~= 1 then return false, "impl " .. p.impl .. " takes wn 1, got " .. p.wn end
  if p.bn ~= 64 then return false, "impl " .. p.impl .. " takes bn 64 (one block per consumer), got " .. p.bn end
  if p.stages ~= 2 then return false, "impl " .. p.impl .. " takes stages 2 (one slot per consumer), got " .. p.stages end
  if f.ps ~= 0 and f.ps % 64 ~= 0 then return false, "impl " .. p.impl .. " needs page_size 0 or a multiple of 64, got " .. f.ps end
  if p.impl == "wgmma_tma" then
    -- one box of a cache's tensor map is one 64-column panel of the tile
    for _, x in ipairs(lo.parts) do
      if x.dim % 64 ~= 0 then
        return false, "impl wgmma_tma needs every key part a multiple of 64 columns (whole panels), got " .. x.name .. " " .. x.dim
      end
    end
  end
  return A.check_smem(shape_wgmma_ks(p, f, lo).smem, dev)
end

-- The FP8 wgmma kernel's scope (parts/decode_wg8.cuh): refuses the rest, naming the value.
local function valid_wg8(p, f, lo, dev)
  if dev.arch ~= "sm_90a" then return false, "impl wg8 needs the sm_90a target (wgmma e4m3), got " .. tostring(dev.arch) end
  if not f.kv then return false, "impl wg8 is the FP8 latent cache's kernel: it needs kv_dtype e4m3" end
  if f.dtype ~= "bf16" then return false, "impl wg8 takes bf16 queries (two e4m3 terms a q), got " .. tostring(f.dtype) end
  if lo.dq % 32 ~= 0 or lo.dq > 640 then
    return false, "impl wg8 needs key columns a multiple of 32 up to 640 (k32 steps, 5 panels), got " .. lo.dq
  end
  if f.dv % 128 ~= 0 then return false, "impl wg8 needs dv a multiple of 128 (whole value panels), got " .. f.dv end
  if p.tm ~= 16 then return false, "impl wg8 takes tm 16 (packed rows a CTA: 32 wgmma columns), got " .. p.tm end
  if p.wn ~= 1 then return false, "impl wg8 is one warpgroup: wn 1, got " .. p.wn end
  if p.bn ~= 64 then return false, "impl wg8 takes bn 64 (one 64-key wgmma tile a block), got " .. p.bn end
  if p.stages < 2 then return false, "impl wg8 takes 2 or more stages (cp.async blocks in flight + 1), got " .. p.stages end
  if f.ps ~= 0 and f.ps % 64 ~= 0 then return false, "impl wg8 needs page_size 0 or a multiple of 64, got " .. f.ps end
  return A.check_smem(shape_wg8(p, f, lo).smem, dev)
end

-- kv_dtype (optional): "e4m3" (or absent / the dtype: 16-bit caches) becomes f.kv, absent when off, so a 16-bit
-- shape has the fixed values, key and source of before
local function fixed(shape)
  local f = { dtype = shape.dtype, g = shape.hq // shape.hkv, parts = shape.parts, value = shape.value, dv = shape.dv,
              layers = shape.layers, ps = shape.page_size, causal = shape.causal }
  if shape.kv_dtype ~= nil and shape.kv_dtype ~= shape.dtype then f.kv = shape.kv_dtype end
  return f
end

-- The FP8 latent cache's scope: e4m3 bytes with one fp32 scale per token (the whole row: latent and rope), the
-- absorbed-MLA form (value aliased, one layer) on impl mma (converted to a 16-bit tile) and impl wg8 (e4m3 wgmma).
-- The keys-split and 16-bit wgmma kernels copy the cache straight into the panels wgmma reads and have no conversion
-- step: refused, naming the combination.
local function valid_kv(p, f)
  if not f.kv then return true end
  if f.kv ~= "e4m3" then return false, "kv_dtype must be e4m3 (or the dtype), got " .. tostring(f.kv) end
  if f.value == "separate" then return false, "the FP8 latent cache (kv_dtype e4m3) needs an aliased value, got value 'separate'" end
  if f.layers ~= 1 then return false, "the FP8 latent cache (kv_dtype e4m3) takes layers 1, got " .. f.layers end
  if p.impl ~= "mma" and p.impl ~= "wg8" then
    return false, "the FP8 latent cache (kv_dtype e4m3) is served by impl mma and wg8, got impl " .. p.impl
  end
  return true
end

local function valid(p, f, dev)
  local ok, why = A.check_fixed(f, false)
  if not ok then return false, why end
  if f.layers < 1 or f.layers > 4 then return false, "layers must be 1..4, got " .. f.layers end
  if f.ps ~= 0 and (f.ps < 16 or f.ps > 1024 or (f.ps & (f.ps - 1)) ~= 0) then
    return false, "page_size must be 0 (contiguous) or a power of two in 16..1024, got " .. f.ps
  end
  local lo, why = layout(f)
  if not lo then return false, why end
  local kok, kwhy = valid_kv(p, f)
  if not kok then return false, kwhy end
  for _, x in ipairs(lo.parts) do
    if x.dim % 16 ~= 0 or x.dim < 16 then return false, "part " .. x.name .. " dim " .. x.dim .. " must be a multiple of 16" end
  end
  if #lo.caches > 12 then return false, "more than 12 caches (" .. #lo.caches .. ")" end
  if lo.dv ~= f.dv then return false, "dv " .. f.dv .. " does not match the value parts (" .. lo.dv .. ")" end
  if f.dv % 16 ~= 0 or f.dv > lo.parts[1].dim and f.value ~= "separate" then return false, "dv " .. f.dv .. " must be a multiple of 16 within the aliased part" end
  if p.impl == "wg8" then return valid_wg8(p, f, lo, dev) end
  if p.impl == "wgmma" then return valid_wgmma(p, f, lo, dev) end
  if is_ks(p) then return valid_wgmma_ks(p, f, lo, dev) end
  local s = shape_of(p, f, lo)
  if s.kw < 16 or s.kw % 16 ~= 0 then return false, "keys per warp bn/wn = " .. s.kw .. " must be a multiple of 16" end
  if s.dvw % 16 ~= 0 then return false, "value columns per warp dv/wn = " .. s.dvw .. " must be a multiple of 16" end
  if p.tm > 16 and p.tm > 2 * f.g then
    -- taller than G x 2 rows: mostly padding at Sq 1..2 (the sweeps' decode)
    return false, "tm " .. p.tm .. " is taller than 2 x g = " .. 2 * f.g .. " rows"
  end
  if s.threads > 1024 then return false, "threads " .. s.threads .. " > 1024" end
  local cap = math.min(255, 65536 // s.threads)
  local regs = s.dvw // 2 + s.kw // 2 + 48
  if regs > cap then return false, "register estimate " .. regs .. " > " .. cap .. " for " .. s.threads .. " threads" end
  -- measured with NVRTC 13 for sm_90a (kforge compile --sweep mla_decode --all): more than 80 fp32 O
  -- accumulators per thread (dv 512 on 2 warps) spill; at 512 threads (128 registers) so do the causal
  -- mask and the one-stage pipeline
  if s.dvw // 2 > 80 then return false, "value columns per warp " .. s.dvw .. " > 160 (O accumulators spill)" end
  if s.dvw // 2 + s.kw // 2 > 128 then
    return false, "O and S accumulators " .. s.dvw // 2 + s.kw // 2 .. " > 128 per thread (spills with 4 layers, bn 128)"
  end
  if s.threads >= 512 and (f.causal ~= 0 or p.stages < 2) then
    return false, s.threads .. " threads (128 registers) spill with causal masking or one stage"
  end
  -- measured likewise (NVRTC 13, sm_90a): tm 64 wn 4 with the FP8 latent cache spills 40 bytes (the conversion and
  -- the score columns' scales)
  if f.kv and s.threads >= 512 then return false, s.threads .. " threads (128 registers) spill with the FP8 latent cache" end
  return A.check_smem(s.smem, dev)
end

return {
  family   = "attn_parts_decode",
  doc      = "split-score decode: score = sum of key parts' q.k (MLA latent+rope, base+delta), value parts (alias or own), joint layer scan, paged KV, split-KV",
  includes = { "lib/attn.lua", "common/parts_params.h", "common/attn_params.h", "common/types.cuh",
               "common/mma.cuh", "common/fp8.cuh", "parts/decode.cuh", "attn/combine.cuh", "common/wgmma.cuh",
               "parts/decode_sm90_common.cuh", "parts/decode_sm90.cuh", "parts/decode_sm90_ks.cuh",
               "common/wgmma_fp8.cuh", "parts/decode_wg8.cuh" },
  shape    = { dtype = "string", b = "int", sq = "int", skv = "int", hq = "int", hkv = "int", parts = "string",
               value = "string", dv = "int", layers = "int", page_size = "int", causal = "int", kv_dtype = "string?" },
  -- impl: "mma" parts/decode.cuh (mma.sync, sm_80+), "wgmma" parts/decode_sm90.cuh (sm_90a, absorbed MLA: layers 1,
  -- value aliased, tm 64, wn 1, bn 32/64, stages >= 2; a producer warpgroup and two consumers splitting the QK
  -- reduction and the value columns), "wgmma_ks" parts/decode_sm90_ks.cuh (sm_90a, absorbed MLA: bn 64, stages 2; the
  -- consumers split the keys, one 64-key block each, and exchange the row maxima and P), "wgmma_ksl" the same with
  -- consumer 1 half a block behind consumer 0 (chained row max: one's softmax under the other's wgmma), "wgmma_tma" the
  -- wgmma_ksl schedule with every whole 64-key block loaded by tensor map (the copy engine; key parts whole 64-column
  -- panels; the host encodes a map a key cache per call, runtime/parts_tmap.c), "wg8" parts/decode_wg8.cuh (sm_90a, the
  -- FP8 latent cache on e4m3 wgmma, the keys as its rows: one warpgroup, tm 16, bn 64, cp.async stages); tm: packed rows per tile (per layer); wn: warps per 16-row group (split
  -- keys for S, value columns for O); bn: keys per block; stages: cp.async depth; sp: key splits (runtime)
  params   = { impl = { "mma", "wgmma", "wgmma_ks", "wgmma_ksl", "wgmma_tma", "wg8" }, tm = { 16, 32, 64 }, wn = { 1, 2, 4, 8 }, bn = { 16, 32, 64, 128 }, stages = { 1, 2, 3, 4 },
               sp = { 1, 2, 4, 8, 16, 32, 64, 128 } },
  runtime  = { sp = true },
  fixed    = fixed,
  valid    = valid,
  default  = function(shape, dev)
    local f = { parts = shape.parts, value = shape.value, dv = shape.dv, layers = shape.layers }
    local lo = layout(f)
    local rows = A.packed_rows(shape)
    local tm = A.tile_rows(rows)
    local wide = lo and lo.dv >= 256
    -- wide values (MLA 512): 4 warps per row group, 128 columns each; narrow ones: one warp, P in registers
    local p = { impl = "mma", tm = tm, wn = wide and 4 or 1, bn = 64, stages = 2, sp = 1 }
    if wide and tm == 64 and shape.causal ~= 0 then p.tm = 32 end   -- 512 threads spill with the causal mask
    if lo and not wide and lo.dv % 32 == 0 and lo.dv // 2 + 32 > 120 then p.wn = 2 end
    local fx = fixed(shape)
    -- Hopper, 64+ packed rows (MLA Hq >= 64 at Sq 1, >= 32 at Sq 2): the wgmma kernel, bn 32 stages 3. Tuned on the
    -- H200 (mla_decode, 2026-11-29) it won 15 of the 17 shapes where it is valid, x1.09..1.71 over the mma default
    -- (B128 4096 Sq1 Hq128: 0.5441 ms, 268 TFLOP/s vs 0.7356 ms); the two B1 Sq1 32K shapes kept mma with sp 64..128.
    local wg = { impl = "wgmma", tm = 64, wn = 1, bn = 32, stages = 3, sp = 1 }
    -- the keys-split kernel (parts/decode_sm90_ks.cuh) first where it is valid, with the lagged consumer schedule
    -- (wgmma_ksl). H200, sustained (kforge run, 2026-12-01): against wgmma_ks, Hq128 B128 4K 0.4501 vs 0.4759 ms
    -- (325 TFLOP/s), Sq2 causal B64 8K 0.8535 vs 0.9293, B1 64K sp64 0.0886 vs 0.0926, Hq16 B128 4K 0.2281 vs
    -- 0.2393; wgmma_ks against wgmma: 307 vs 270 TFLOP/s at Hq128 4K (bench/RESULTS.md, sessions 5 and 6)
    -- wgmma_tma (that schedule, whole blocks by tensor map) before it where the key parts are whole panels. H200,
    -- sustained (kforge run, 2026-12-02, session 12), against wgmma_ksl in the same call: Hq128 B128 4K 0.3014 vs
    -- 0.4500 ms (484 TFLOP/s at 1588 MHz, power-limited), Sq2 causal B64 8K 0.5298 vs 0.8584, B1 64K sp64 0.0670 vs
    -- 0.0876, Hq16 B128 4K 0.1727 vs 0.2377
    -- The mla_decode sweep (sustained, every variant; H200, session 12) chose wgmma_tma on all 24 shapes, Hq 16..128,
    -- Sq 1 and 2, B 1 / 16 / 128: from 16 packed rows on, at any batch (over the mma default x1.16..1.33 at Hq 16 Sq 1
    -- and at B 1 Hq 32 Sq 1, x1.30)
    local ks = { impl = "wgmma_tma", tm = 64, wn = 1, bn = 64, stages = 2, sp = 1 }
    -- wgmma_ksl (key parts that are not whole panels): also at 32 packed rows (half the tile) once 16 or more
    -- (sequence, kv head) pairs fill the machine: the sustained sweep chose it over the mma default on all four such
    -- shapes, x1.023..1.080 (Hq 32 Sq 1 and Hq 16 Sq 2 causal, B 16 and B 128; H200, 2026-12-01, session 7); at B 1 the
    -- mma kernel with more splits won
    local many = shape.b * shape.hkv >= 16
    local ksl = { impl = "wgmma_ksl", tm = 64, wn = 1, bn = 64, stages = 2, sp = 1 }
    -- The FP8 latent cache on sm_90a: impl wg8 (e4m3 wgmma), stages 2 so that two CTAs share an SM (110 KB of shared
    -- memory, 255 registers x 128 threads each), splits up to two CTAs an SM over its 16-row tiles. H100, sustained
    -- (kforge run, sessions 28-29): B128 Hq16 4K 0.122-0.125 ms against 0.284 for the mma kernel and 0.203 for bf16;
    -- sp 1 0.150, sp 4 0.159, stages 3 (one CTA an SM) 0.145 (session 28's kernel); B1 64K Hq16 sp 128 0.0400 against
    -- bf16 0.0517; B128 Hq128 4K (eight 16-row tiles, each reading every block) sp 1 0.738 against 1.180 for the mma
    -- kernel (bf16 0.326: at 128 rows the FP8 cache costs more than it saves)
    local w8 = { impl = "wg8", tm = 16, wn = 1, bn = 64, stages = 2, sp = 1 }
    if lo and fx.kv and valid(w8, fx, dev) then
      w8.sp = A.splits(shape.b * shape.hkv * cdiv(rows, 16), shape.skv, dev, 512, 2)
      return w8
    end
    if lo and rows >= 16 and valid(ks, fx, dev) then
      p = ks
    elseif lo and (rows >= 64 or (rows >= 32 and many)) and valid(ksl, fx, dev) then
      p = ksl
    elseif lo and rows >= 64 and valid(wg, fx, dev) then
      p = wg
    else
      -- the first that is valid on the device (a 64-row tile of 576-column MLA rows needs more shared memory than
      -- an sm_80 has): fewer rows, then one stage
      local t32 = math.min(p.tm, 32)
      p = A.first_valid(valid, fx, dev, p, { {}, { tm = t32 }, { tm = t32, stages = 1 }, { tm = 16, stages = 1 } })
    end
    -- at least 512 keys a split: at B 1 and 32K keys the sustained sweep chose 64 splits on every shape where the
    -- default took 128 (256 keys a split), x1.17..1.25 (H200, 2026-12-01, session 7). At Hq 16 Sq 1 the split count
    -- is the only difference (x1.19); at Hq 32 and Hq 64, and Hq 16 Sq 2, the winner also has smaller row tiles.
    -- The 512 latent values of each partial make a combine of 128 cost more than the extra CTAs bring.
    p.sp = A.splits(shape.b * shape.hkv * cdiv(rows, p.tm), shape.skv, dev, 512)
    return p
  end,
  render   = function(p, f)
    local lo = assert(layout(f))
    local cl, kl = {}, {}
    for i, c in ipairs(lo.caches) do cl[#cl + 1] = string.format("X(%d, %d, %d)", i - 1, c.off8, c.dim) end
    for i, k in ipairs(lo.kparts) do kl[#kl + 1] = string.format("X(%d, %d, %d, %d, %d)", i - 1, k.q8, k.dim, k.k8, k.ls8) end
    local vf = { "__device__ __forceinline__ int kf_vchunk(int l, int c16)\n{" }
    for i, v in ipairs(lo.vsegs) do
      local ret = string.format("return %s + %d + l * %d + 2 * (c16 - %d);", (i == 1) and "KF_VALIAS_OFF8" or "0", v.k8, v.ls8, v.c0)
      if i < #lo.vsegs then
        vf[#vf + 1] = string.format("    if (c16 < %d) %s", v.c1, ret)
      else
        vf[#vf + 1] = "    " .. ret
      end
    end
    vf[#vf + 1] = "}\n"
    local hdr = subst([[
#define KF_BF16 ${bf16}
#define KF_G ${g}
#define KF_CAUSAL ${causal}
#define KF_L ${layers}
#define KF_TM ${tm}
#define KF_BN ${bn}
#define KF_WN ${wn}
#define KF_STAGES ${stages}
#define KF_PS ${ps}
#define KF_DQ ${dq}
#define KF_DQP ${dqp}
#define KF_DV ${dv}
#define KF_W ${w}
#define KF_SCORE_PARTS ${nparts} // KF_MUTANT_DELTA
#define KF_VALIAS_OFF8 0 // KF_MUTANT_VALUE
#define KF_FOR_CACHES(X) ${caches}
#define KF_FOR_KPARTS(X) ${kparts}
]], { bf16 = A.bf16(f), g = f.g, causal = f.causal, layers = f.layers, tm = p.tm, bn = p.bn,
      wn = p.wn, stages = p.stages, ps = f.ps, dq = lo.dq, dqp = lo.dqp, dv = lo.dv, w = lo.w, nparts = #lo.parts,
      caches = table.concat(cl, " "), kparts = table.concat(kl, " ") }) .. A.combine_defines(lo.dv)
      .. (f.kv and "#define KF_KV8 1\n" or "")
    if is_ks(p) then
      -- wgmma_ksl: the same kernel with the lagged consumer schedule (KF_KS_LAG, parts/decode_sm90_ks.cuh); wgmma_tma:
      -- the lagged schedule with whole blocks loaded by tensor map (KF_PARTS_TMA; attn_params.h first: kf_tmap)
      local tma = p.impl == "wgmma_tma"
      local frags = tma and { "common/attn_params.h", "common/parts_params.h" } or { "common/parts_params.h", "common/attn_params.h" }
      for _, x in ipairs({ "common/types.cuh", "common/mma.cuh", "common/wgmma.cuh", "parts/decode_sm90_common.cuh",
                           "parts/decode_sm90_ks.cuh", "attn/combine.cuh" }) do frags[#frags + 1] = x end
      return hdr .. "#define KF_KS_LAG " .. ((p.impl == "wgmma_ksl" or tma) and 1 or 0) .. "\n"
        .. (tma and "#define KF_PARTS_TMA 1\n" or "") .. A.fragments(frags)
    end
    if p.impl == "wg8" then
      return hdr .. "#define KF_PARTS_MAPS 1\n" .. A.fragments({ "common/attn_params.h", "common/parts_params.h", "common/types.cuh", "common/fp8.cuh",
                                  "common/mma.cuh", "common/wgmma.cuh", "common/wgmma_fp8.cuh",
                                  "parts/decode_sm90_common.cuh", "parts/decode_wg8.cuh", "attn/combine.cuh" })
    end
    if p.impl == "wgmma" then
      return hdr .. A.fragments({ "common/parts_params.h", "common/attn_params.h", "common/types.cuh", "common/mma.cuh",
                                  "common/wgmma.cuh", "parts/decode_sm90_common.cuh", "parts/decode_sm90.cuh",
                                  "attn/combine.cuh" })
    end
    return hdr .. fragment("common/parts_params.h") .. "\n" .. fragment("common/attn_params.h") .. "\n"
      .. fragment("common/types.cuh") .. "\n" .. (f.kv and fragment("common/fp8.cuh") .. "\n" or "")
      .. fragment("common/mma.cuh") .. "\n" .. table.concat(vf, "\n")
      .. fragment("parts/decode.cuh") .. "\n" .. fragment("attn/combine.cuh")
  end,
  kernels  = function(p, f, dev)
    local lo = assert(layout(f))
    local s = shape_of(p, f, lo)
    local ks = { { name = "kf_parts_decode", threads = s.threads, smem = s.smem } }
    if p.sp > 1 then ks[2] = A.combine_kernel(lo.dv) end
    return A.pdl(ks)   -- the split kernel and the combine behind it: dependent launch on sm_90+
  end,
}
