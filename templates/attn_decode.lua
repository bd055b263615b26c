-- attn_decode.lua: GQA decode (Sq 1..16): G heads x Sq rows of one KV head packed per tile, warps split keys, split-KV + combine

-- impl "mma": attn/fwd.cuh (the packed rows are the MMA's M, K/V through cp.async stages; tm rows, w warps, bn keys
-- a block, stages). impl "direct": attn/decode_direct.cuh (the keys are the MMA's M and the packed rows its N, K/V
-- loaded straight into fragment registers): tm packed rows a CTA (8 or 16, one MMA column each; 4: FP8 at bf16, two
-- e4m3 terms a row as the 8 columns), w warps, bn keys a warp step (16 or 32; FP8 K/V: 32, the e4m3 MMA's k,
-- sm_89+), stages = steps of loads a warp keeps in flight (1 or 2). impl "wg8" (FP8 K/V, sm_90a): attn/decode_wg8.cuh
-- (one warpgroup, the keys as wgmma's M on the native e4m3 tensor cores, K/V through cp.async stages): tm packed rows
-- (4, 8, 16: two e4m3 Q terms each, 2 tm columns), w 4, bn keys a block (64 or 128), stages (2..4).
local A = import("lib/attn.lua")

local function direct_shape(p, f)
  local nc = math.max(8, p.tm)   -- MMA columns (tm 4: 4 rows x 2 e4m3 terms)
  local nq = nc // 8
  -- merge buffer [columns][d + 4] fp32, per-warp max / sum, per-column max / sum
  local smem = nc * (f.d + 4) * 4 + (2 * p.w * nc + 2 * nc) * 4
  -- 32-bit registers a thread: raw K/V words of the steps in flight, O^T, Q^T fragments, the rest
  local raw = (p.bn // 16) * (f.kv and f.d // 4 or f.d // 2)
  -- Q: d / 8 words a column (FP8: 2 e4m3 terms of d / 16 words at bf16, 3 at fp16; tm 4: the terms are columns)
  local qw = f.kv and ((p.tm == 4) and 1 or (f.dtype == "bf16") and 2 or 3) * f.d // 16 or f.d // 8
  local live = p.stages * raw + nq * f.d // 4 + nq * qw
  -- FP8: ptxas takes ~1.7 registers a live word (the e4m3 path's transposes and terms; nvcc 13.0, sm_90a: 112
  -- words 242 registers, no spill; 120 spills): the estimate keeps that path at 112 words
  local regs = f.kv and (live + 120) or (live + 48)
  return { smem = smem, threads = 32 * p.w, regs = regs }
end

local function valid_direct(p, f, dev)
  if p.tm ~= 4 and p.tm ~= 8 and p.tm ~= 16 then
    return false, "impl direct takes tm 4, 8 or 16 (packed rows a CTA), got " .. p.tm
  end
  if p.tm == 4 and not (f.kv and f.dtype == "bf16") then
    return false, "impl direct takes tm 4 (two e4m3 terms as columns) only with FP8 K/V at bf16"
  end
  if p.bn ~= 16 and p.bn ~= 32 then return false, "impl direct takes bn 16 or 32 (keys a warp step), got " .. p.bn end
  if p.stages > 2 then return false, "impl direct keeps 1 or 2 steps of loads in flight (stages), got " .. p.stages end
  if f.kv and dev.cc < 89 then return false, "impl direct with FP8 K/V needs the e4m3 MMA (sm_89 or newer)" end
  if f.kv and p.bn ~= 32 then return false, "impl direct with FP8 K/V takes bn 32 (the e4m3 MMA's k), got " .. p.bn end
  local s = direct_shape(p, f)
  if s.regs > 232 then return false, "register estimate " .. s.regs .. " > 232 (spills)" end
  return A.check_smem(s.smem, dev)
end

-- impl wg8: shared memory = 1024 (alignment) + Q^T and P^T (2 tm rows of 128 bytes each) + stages x (K bn x d,
-- V bn x (d + 16)) + the block maxima [4 warps][tm] fp32
local function wg8_smem(p, f)
  return 1024 + 2 * (2 * p.tm * 128) + p.stages * p.bn * (2 * f.d + 16) + 4 * p.tm * 4
end

local function valid_wg8(p, f, dev)
  if dev.arch ~= "sm_90a" then return false, "impl wg8 needs the sm_90a target (wgmma e4m3), got " .. tostring(dev.arch) end
  if not f.kv then return false, "impl wg8 is the FP8 K/V kernel: it needs kv_dtype e4m3" end
  if f.dtype ~= "bf16" then return false, "impl wg8 takes bf16 queries (two e4m3 terms a q), got " .. tostring(f.dtype) end
  if f.d ~= 128 then return false, "impl wg8 takes head dim 128 (a thread's four d of each V row), got " .. f.d end
  if p.tm ~= 4 and p.tm ~= 8 and p.tm ~= 16 then
    return false, "impl wg8 takes tm 4, 8 or 16 (packed rows a CTA, 2 tm wgmma columns), got " .. p.tm
  end
  if p.w ~= 4 then return false, "impl wg8 is one warpgroup: w 4, got " .. p.w end
  if p.bn ~= 64 and p.bn ~= 128 then return false, "impl wg8 takes bn 64 or 128 (64-key wgmma tiles a block), got " .. p.bn end
  if p.stages < 2 then return false, "impl wg8 takes 2 or more stages (cp.async blocks in flight + 1), got " .. p.stages end
  return A.check_smem(wg8_smem(p, f), dev)
end

local function shape_of(p, f)
  local wm = math.min(p.w, p.tm // 16)
  local wn = p.w // wm
  local qreg = (f.d <= 128) and 1 or 0
  local kv = p.stages * 2 * p.bn * f.d * 2
  if f.kv then kv = p.stages * 2 * p.bn * f.d end   -- fp8 stages only: K and V fragments straight from them
  local merge = (wn > 1) and (p.tm * (f.d + 8) * 4 + 2 * wn * p.tm * 4) or 0
  local smem = p.tm * f.d * 2 + math.max(kv, merge)
  return { wm = wm, wn = wn, kw = p.bn // wn, qreg = qreg, smem = smem, threads = 32 * p.w }
end

return {
  family   = "attn_decode",
  doc      = "GQA attention decode (Sq 1..16): packed G x Sq query tile per KV head, split-KV with combine; sliding window, softcap, sinks, FP8 K/V",
  includes = { "lib/attn.lua", "common/attn_params.h", "common/types.cuh", "common/fp8.cuh", "common/mma.cuh",
               "common/attn_features.cuh", "common/wgmma.cuh", "common/wgmma_fp8.cuh", "attn/fwd.cuh",
               "attn/decode_rows.cuh", "attn/decode_direct.cuh", "attn/decode_wg8.cuh", "attn/combine.cuh" },
  shape    = A.gqa_shape(),
  -- tm: packed rows per tile; w: warps; bn: keys per block; stages: cp.async depth; sp: key splits (runtime)
  params   = { impl = { "mma", "direct", "wg8" }, tm = { 4, 8, 16, 32, 64 }, w = { 4, 8 }, bn = { 16, 32, 64, 128 },
               stages = { 1, 2, 3, 4 }, sp = { 1, 2, 4, 8, 16, 32, 64, 128 } },
  runtime  = { sp = true },
  fixed    = A.gqa_fixed,
  valid    = function(p, f, dev)
    local ok, why = A.check_fixed(f, true)
    if not ok then return false, why end
    ok, why = A.check_features(f, true)
    if not ok then return false, why end
    if p.impl == "direct" then return valid_direct(p, f, dev) end
    if p.impl == "wg8" then return valid_wg8(p, f, dev) end
    if p.stages > 3 then return false, "impl mma takes 1 to 3 stages, got " .. p.stages end
    if p.tm < 16 or p.bn < 32 then return false, "impl mma takes tm >= 16 and bn >= 32" end
    if f.kv and p.stages < 2 then return false, "FP8 K/V needs 2 or more stages" end
    if f.kv and (p.bn * f.d // 16) % (32 * p.w) ~= 0 then   -- attn/fwd.cuh kf_load_kv8: whole rounds of copies
      return false, "FP8 K/V: a block's 16-byte chunks (bn " .. p.bn .. " x d " .. f.d .. " / 16) must fill the " .. 32 * p.w .. " threads evenly"
    end
    local s = shape_of(p, f)
    if s.kw < 16 or s.kw % 16 ~= 0 then return false, "keys per warp bn/" .. s.wn .. " must be a multiple of 16" end
    local mt = p.tm // (16 * s.wm)
    local regs = mt * (f.d // 2 + s.kw // 2 + s.qreg * f.d // 4) + 40
    if regs > 240 then return false, "register estimate " .. regs .. " > 240 (spills)" end
    -- seen spilling with nvcc 13.0 (bench/dev/compile_all.sh) at head dim 256 with wider key slices
    if f.d >= 256 and not (s.kw <= 16 or (s.wn == 1 and s.kw <= 32)) then
      return false, "keys per warp " .. s.kw .. " spills at head dim 256 (need 16, or 32 with one key slice)"
    end
    return A.check_smem(s.smem, dev)
  end,
  default  = function(shape, dev)
    -- measured on H200, B1 32/8 D128 128K bf16: tm16 w4 bn128 st2 sp16 3.84 TB/s (sp8 3.45, sp32 3.47);
    -- B32 32/8 D128 8K: sp1 4.23 TB/s (sp2 4.06)
    local rows = A.packed_rows(shape)
    -- a sliding window: only about window + sq keys are visited, whatever the cache holds
    local skv = shape.window and math.min(shape.skv, shape.window + shape.sq) or shape.skv
    local f = A.gqa_fixed(shape)
    if f.kv then   -- FP8 K/V: impl wg8 on sm_90a where the batch alone fills the SMs, else impl direct where valid
      local tmd = (rows <= 4) and 4 or (rows <= 8) and 8 or 16
      -- wg8: 64-key blocks, 3 stages; as many CTAs an SM as shared memory holds (bn 64 st 3: 4 at tm 4 and 8, 3 at
      -- tm 16, which its 161 registers also allow). Taken where the batch's CTAs fill the SMs without splits: there
      -- the H200 runs at its power limit and wg8's fewer watts a byte give the clock back. Session 24, B32 32/8 D128
      -- 32K: H200 wg8 st 3 sp 2 0.523 ms (1695 MHz), impl direct 0.585 (1470 MHz); H100 at 1980 MHz (not
      -- power-bound) direct 0.710, wg8 0.750, and direct 1-6% ahead on the split rows (B1 128K, B8 64/8 8K) too
      local g = { impl = "wg8", tm = tmd, w = 4, bn = 64, stages = 3, sp = 1 }
      if shape.b * shape.hkv * cdiv(rows, g.tm) >= dev.sms and valid_wg8(g, f, dev) then
        local per_sm = math.min(4, dev.smem_sm // (wg8_smem(g, f) + 1024))   -- 1 KB reserved a CTA
        g.sp = A.splits(shape.b * shape.hkv * cdiv(rows, g.tm), skv, dev, nil, per_sm)
        return g
      end
      local q = A.first_valid(valid_direct, f, dev, { impl = "direct", tm = tmd, w = 4, bn = 32, stages = 2, sp = 1 },
                              { {}, { stages = 1 }, { tm = 8 }, { tm = 8, stages = 1 } })
      if valid_direct(q, f, dev) then
        -- 4 warps a CTA: two CTAs an SM (H200, session 13: B1 128K sp 32 0.122 ms, sp 16 0.189; B8 64/8 8K sp 4
        -- 0.065, sp 2 0.098)
        q.sp = A.splits(shape.b * shape.hkv * cdiv(rows, q.tm), skv, dev, nil, 2)
        return q
      end
    end
    local tm = A.tile_rows(rows)
    local p = { impl = "mma", tm = tm, w = 4, bn = 128, stages = 2, sp = 1 }
    if shape.d >= 256 then   -- 16 keys per warp (register limit): bn = 16 * key slices
      p.w = (tm == 16) and 4 or 8
      p.bn = 16 * (p.w // math.min(p.w, tm // 16))
    end
    p.sp = A.splits(shape.b * shape.hkv * cdiv(rows, tm), skv, dev)
    return p
  end,
  render   = function(p, f)
    if p.impl == "wg8" or p.impl == "direct" then
      local wg8 = p.impl == "wg8"
      local own = wg8 and subst("#define KF_STAGES ${st}\n", { st = p.stages })
                  or subst("#define KF_W ${w}\n#define KF_KS ${ks}\n#define KF_PF ${pf}\n",
                           { w = p.w, ks = p.bn // 16, pf = p.stages })
      local hdr = A.feature_defines(f) .. subst([[
#define KF_BF16 ${bf16}
#define KF_D ${d}
#define KF_G ${g}
#define KF_CAUSAL ${causal}
#define KF_TM ${tm}
#define KF_BN ${bn}
]], { bf16 = A.bf16(f), d = f.d, g = f.g, causal = f.causal, tm = p.tm, bn = p.bn })
        .. own .. "#define KF_FWD_NAME kf_attn_decode\n" .. A.combine_defines(f.d)
      local body = wg8 and { "common/wgmma.cuh", "common/wgmma_fp8.cuh", "common/attn_features.cuh",
                             "attn/decode_rows.cuh", "attn/decode_wg8.cuh" }
                   or { "common/attn_features.cuh", "attn/decode_rows.cuh", "attn/decode_direct.cuh" }
      local paths = { "common/attn_params.h", "common/types.cuh", "common/mma.cuh" }
      for _, x in ipairs(body) do paths[#paths + 1] = x end
      paths[#paths + 1] = "attn/combine.cuh"
      return hdr .. A.fragments_kv(f, paths)
    end
    local s = shape_of(p, f)
    local hdr = A.feature_defines(f) .. A.fwd_defines(f, { decode = 1, tm = p.tm, bn = p.bn, wm = s.wm, wn = s.wn, stages = p.stages,
                                   qreg = s.qreg, name = "kf_attn_decode" }) .. A.combine_defines(f.d)
    return hdr .. A.fragments_kv(f, { "common/attn_params.h", "common/types.cuh", "common/mma.cuh",
                                "common/attn_features.cuh", "attn/fwd.cuh", "attn/combine.cuh" })
  end,
  kernels  = function(p, f, dev)
    local s
    if p.impl == "wg8" then s = { threads = 128, smem = wg8_smem(p, f) }
    elseif p.impl == "direct" then s = direct_shape(p, f)
    else s = shape_of(p, f) end
    local ks = { { name = "kf_attn_decode", threads = s.threads, smem = s.smem } }
    if p.sp > 1 then ks[2] = A.combine_kernel(f.d) end
    return A.pdl(ks)
  end,
}
