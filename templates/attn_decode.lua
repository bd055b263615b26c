-- attn_decode.lua: GQA decode (Sq 1..16): G heads x Sq rows of one KV head packed per tile, warps split keys, split-KV + combine
local function cdiv_(a, b) return (a + b - 1) // b end

-- combine kernel of a split variant: 4 columns per thread, up to 128 threads (runtime/attn_launch.c mirrors this)
local function combine_rows(d)
  local r = 128 // (d // 4)
  if r < 1 then r = 1 end
  if r > 8 then r = 8 end
  return r
end

local function shape_of(p, f)
  local wm = math.min(p.w, p.tm // 16)
  local wn = p.w // wm
  local qreg = (f.d <= 128) and 1 or 0
  local kv = p.stages * 2 * p.bn * f.d * 2
  local merge = (wn > 1) and (p.tm * (f.d + 8) * 4 + 2 * wn * p.tm * 4) or 0
  local smem = p.tm * f.d * 2 + math.max(kv, merge)
  return { wm = wm, wn = wn, kw = p.bn // wn, qreg = qreg, smem = smem, threads = 32 * p.w }
end

return {
  family   = "attn_decode",
  doc      = "GQA attention decode (Sq 1..16): packed G x Sq query tile per KV head, split-KV with combine",
  includes = { "common/attn_params.h", "common/types.cuh", "common/mma.cuh", "attn/fwd.cuh", "attn/combine.cuh" },
  shape    = { dtype = "string", b = "int", sq = "int", skv = "int", hq = "int", hkv = "int", d = "int", causal = "int" },
  -- tm: packed rows per tile; w: warps; bn: keys per block; stages: cp.async depth; sp: key splits (runtime)
  params   = { tm = { 16, 32, 64 }, w = { 4, 8 }, bn = { 32, 64, 128 }, stages = { 1, 2, 3 },
               sp = { 1, 2, 4, 8, 16, 32, 64, 128 } },
  runtime  = { sp = true },
  fixed    = function(shape)
    return { dtype = shape.dtype, d = shape.d, g = shape.hq // shape.hkv, causal = shape.causal }
  end,
  valid    = function(p, f, dev)
    if f.dtype ~= "bf16" and f.dtype ~= "fp16" then return false, "dtype must be bf16 or fp16, got " .. tostring(f.dtype) end
    if f.d ~= 64 and f.d ~= 128 and f.d ~= 256 then return false, "head dim must be 64, 128 or 256, got " .. tostring(f.d) end
    if f.g < 1 then return false, "g = hq / hkv must be >= 1" end
    if f.causal ~= 0 and f.causal ~= 1 then return false, "causal must be 0 or 1" end
    local s = shape_of(p, f)
    if s.kw < 16 or s.kw % 16 ~= 0 then return false, "keys per warp bn/" .. s.wn .. " must be a multiple of 16" end
    local mt = p.tm // (16 * s.wm)
    local regs = mt * (f.d // 2 + s.kw // 2 + s.qreg * f.d // 4) + 40
    if regs > 240 then return false, "register estimate " .. regs .. " > 240 (spills)" end
    -- seen spilling with nvcc 13.0 (bench/dev/compile_all.sh) at head dim 256 with wider key slices
    if f.d >= 256 and not (s.kw <= 16 or (s.wn == 1 and s.kw <= 32)) then
      return false, "keys per warp " .. s.kw .. " spills at head dim 256 (need 16, or 32 with one key slice)"
    end
    if s.smem > dev.smem_optin then return false, "shared memory " .. s.smem .. " > " .. dev.smem_optin end
    return true
  end,
  default  = function(shape, dev)
    -- measured on H200, B1 32/8 D128 128K bf16: tm16 w4 bn128 st2 sp16 3.84 TB/s (sp8 3.45, sp32 3.47);
    -- B32 32/8 D128 8K: sp1 4.23 TB/s (sp2 4.06)
    local rows = (shape.hq // shape.hkv) * shape.sq
    local tm = (rows <= 16) and 16 or ((rows <= 32) and 32 or 64)
    local p = { tm = tm, w = 4, bn = 128, stages = 2, sp = 1 }
    if shape.d >= 256 then   -- 16 keys per warp (register limit): bn = 16 * key slices
      p.w = (tm == 16) and 4 or 8
      p.bn = 16 * (p.w // math.min(p.w, tm // 16))
    end
    -- split-KV: about one wave of CTAs (more splits measured slower), never fewer than 256 keys per split
    local ctas = shape.b * shape.hkv * cdiv_(rows, tm)
    local maxsp = math.max(1, shape.skv // 256)
    for _, sp in ipairs({ 1, 2, 4, 8, 16, 32, 64, 128 }) do
      if sp <= maxsp and ctas * sp <= dev.sms then p.sp = sp end
    end
    return p
  end,
  render   = function(p, f)
    local s = shape_of(p, f)
    local hdr = subst([[
#define KF_BF16 ${bf16}
#define KF_D ${d}
#define KF_G ${g}
#define KF_CAUSAL ${causal}
#define KF_DECODE 1
#define KF_TM ${tm}
#define KF_BN ${bn}
#define KF_WM ${wm}
#define KF_WN ${wn}
#define KF_STAGES ${stages}
#define KF_QREG ${qreg}
#define KF_MINB 1
#define KF_FWD_NAME kf_attn_decode
#define KF_CMB_DV ${d}
#define KF_CMB_VEC 4
#define KF_CMB_ROWS ${crows}
]], { bf16 = (f.dtype == "bf16") and 1 or 0, d = f.d, g = f.g, causal = f.causal, tm = p.tm, bn = p.bn,
      wm = s.wm, wn = s.wn, stages = p.stages, qreg = s.qreg, crows = combine_rows(f.d) })
    return hdr .. fragment("common/attn_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n"
      .. fragment("common/mma.cuh") .. "\n" .. fragment("attn/fwd.cuh") .. "\n" .. fragment("attn/combine.cuh")
  end,
  kernels  = function(p, f, dev)
    local s = shape_of(p, f)
    local ks = { { name = "kf_attn_decode", threads = s.threads, smem = s.smem } }
    if p.sp > 1 then
      ks[2] = { name = "kf_attn_combine", threads = (f.d // 4) * combine_rows(f.d), smem = 0 }
    end
    return ks
  end,
}
