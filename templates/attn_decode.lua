-- attn_decode.lua: GQA decode (Sq 1..16): G heads x Sq rows of one KV head packed per tile, warps split keys, split-KV + combine
local A = import("lib/attn.lua")

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
               "common/attn_features.cuh", "attn/fwd.cuh", "attn/combine.cuh" },
  shape    = A.gqa_shape(),
  -- tm: packed rows per tile; w: warps; bn: keys per block; stages: cp.async depth; sp: key splits (runtime)
  params   = { tm = { 16, 32, 64 }, w = { 4, 8 }, bn = { 32, 64, 128 }, stages = { 1, 2, 3 },
               sp = { 1, 2, 4, 8, 16, 32, 64, 128 } },
  runtime  = { sp = true },
  fixed    = A.gqa_fixed,
  valid    = function(p, f, dev)
    local ok, why = A.check_fixed(f, true)
    if not ok then return false, why end
    ok, why = A.check_features(f, true)
    if not ok then return false, why end
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
    local tm = A.tile_rows(rows)
    local p = { tm = tm, w = 4, bn = 128, stages = 2, sp = 1 }
    if shape.d >= 256 then   -- 16 keys per warp (register limit): bn = 16 * key slices
      p.w = (tm == 16) and 4 or 8
      p.bn = 16 * (p.w // math.min(p.w, tm // 16))
    end
    -- a sliding window: only about window + sq keys are visited, whatever the cache holds
    local skv = shape.window and math.min(shape.skv, shape.window + shape.sq) or shape.skv
    p.sp = A.splits(shape.b * shape.hkv * cdiv(rows, tm), skv, dev)
    return p
  end,
  render   = function(p, f)
    local s = shape_of(p, f)
    local hdr = A.feature_defines(f) .. A.fwd_defines(f, { decode = 1, tm = p.tm, bn = p.bn, wm = s.wm, wn = s.wn, stages = p.stages,
                                   qreg = s.qreg, name = "kf_attn_decode" }) .. A.combine_defines(f.d)
    return hdr .. A.fragments_kv(f, { "common/attn_params.h", "common/types.cuh", "common/mma.cuh",
                                "common/attn_features.cuh", "attn/fwd.cuh", "attn/combine.cuh" })
  end,
  kernels  = function(p, f, dev)
    local s = shape_of(p, f)
    local ks = { { name = "kf_attn_decode", threads = s.threads, smem = s.smem } }
    if p.sp > 1 then ks[2] = A.combine_kernel(f.d) end
    return ks
  end,
}
