-- lib/attn.lua: what the GQA attention templates share (attn_decode, attn_prefill, attn_parts_decode,
-- attn_combine): the checks of the fixed values, the split-KV rules, the combine kernel's shape.
-- A template reads it with import("lib/attn.lua") and lists it in its includes.
local A = {}

-- The shape of a GQA attention call (attn_decode, attn_prefill). The model features are optional keys
-- ("int?" / "string?": a shape without them is the plain attention of before, same fixed values, same source):
-- window (window_left >= 0), softcap (the cap, rounded: its exact value is a runtime argument), sinks (1),
-- kv_dtype ("e4m3": FP8 K/V).
function A.gqa_shape()
  return { dtype = "string", b = "int", sq = "int", skv = "int", hq = "int", hkv = "int", d = "int", causal = "int",
           window = "int?", softcap = "int?", sinks = "int?", kv_dtype = "string?", page_size = "int?" }
end

-- The fixed values of the model features of a shape, added to f only when on: win 1, cap 1, sink 1, kv "e4m3".
function A.feature_fixed(shape, f)
  if shape.window ~= nil then f.win = 1 end
  if shape.softcap ~= nil and shape.softcap ~= 0 then f.cap = 1 end
  if shape.sinks ~= nil and shape.sinks ~= 0 then f.sink = 1 end
  if shape.kv_dtype ~= nil and shape.kv_dtype ~= shape.dtype then f.kv = shape.kv_dtype end
  -- paged K/V (shape.page_size) is no fixed value: the page table is every kernel's runtime argument and the
  -- source is the same, so a paged plan shares the binary (and a bundle's) of the contiguous one. Only
  -- attn_prefill's default looks at it (wgmma_tma has no tensor map of a page pool; its plan refuses one).
  return f
end

-- Its compile-time facts: dtype, head dim, group size, causal flag (and the features that are on).
function A.gqa_fixed(shape)
  return A.feature_fixed(shape, { dtype = shape.dtype, d = shape.d, g = shape.hq // shape.hkv, causal = shape.causal })
end

-- valid() checks of the feature values: true, or false and why. fp8: whether the kernel takes FP8 K/V.
function A.check_features(f, fp8)
  if f.win and f.causal ~= 1 then return false, "a sliding window (window) needs causal 1" end
  if f.win and f.win ~= 1 then return false, "win must be 1" end
  if f.cap and f.cap ~= 1 then return false, "cap must be 1" end
  if f.sink and f.sink ~= 1 then return false, "sink must be 1" end
  if f.kv and f.kv ~= "e4m3" then return false, "kv_dtype must be e4m3 (or the dtype), got " .. tostring(f.kv) end
  if f.kv and not fp8 then return false, "FP8 K/V (kv_dtype e4m3) is served by attn_decode and the mma prefill only" end
  return true
end

-- The defines of the features that are on (empty for none: the source of a plain shape is unchanged).
function A.feature_defines(f)
  local t = {}
  if f.win or f.cap or f.sink or f.kv then t[#t + 1] = "#define KF_ATTN_EXT 1" end
  if f.win then t[#t + 1] = "#define KF_WIN 1" end
  if f.cap then t[#t + 1] = "#define KF_CAP 1" end
  if f.sink then t[#t + 1] = "#define KF_SINK 1" end
  if f.kv then t[#t + 1] = "#define KF_KV8 1" end
  if #t == 0 then return "" end
  return table.concat(t, "\n") .. "\n"
end

function A.dtype_ok(dt) return dt == "bf16" or dt == "fp16" end

-- valid() checks of the fixed values: dtype, head dim (when f.d is one), group size, causal flag.
-- true, or false and why.
function A.check_fixed(f, head_dim)
  if not A.dtype_ok(f.dtype) then return false, "dtype must be bf16 or fp16, got " .. tostring(f.dtype) end
  if head_dim and f.d ~= 64 and f.d ~= 128 and f.d ~= 256 then
    return false, "head dim must be 64, 128 or 256, got " .. tostring(f.d)
  end
  if f.g < 1 then return false, "g = hq / hkv must be >= 1" end
  if f.causal ~= 0 and f.causal ~= 1 then return false, "causal must be 0 or 1" end
  return true
end

function A.check_smem(smem, dev)
  if smem > dev.smem_optin then return false, "shared memory " .. smem .. " > " .. dev.smem_optin end
  return true
end

-- KF_BF16 of a render
function A.bf16(f) return (f.dtype == "bf16") and 1 or 0 end

-- The fragments, in order, joined by newlines.
function A.fragments(paths)
  local t = {}
  for i, path in ipairs(paths) do t[i] = fragment(path) end
  return table.concat(t, "\n")
end

-- The fragments of a render, in order, joined by newlines, with common/fp8.cuh (the e4m3 decode rule) right after
-- common/types.cuh when K/V are FP8 (f.kv): a source without FP8 holds no word of it.
function A.fragments_kv(f, paths)
  if not f.kv then return A.fragments(paths) end
  local t = {}
  for _, path in ipairs(paths) do
    t[#t + 1] = path
    if path == "common/types.cuh" then t[#t + 1] = "common/fp8.cuh" end
  end
  return A.fragments(t)
end

-- Combine kernel of a split variant: 4 columns per thread, up to 128 threads, so 1..8 rows of dv
-- columns per block (runtime/attn_launch.c and runtime/parts_launch.c mirror this).
function A.combine_rows(dv)
  local r = 128 // (dv // 4)
  if r < 1 then r = 1 end
  if r > 8 then r = 8 end
  return r
end

-- The combine kernel's defines and its entry in a kernels() list (after the split kernel).
function A.combine_defines(dv)
  return subst("#define KF_CMB_DV ${dv}\n#define KF_CMB_VEC 4\n#define KF_CMB_ROWS ${rows}\n",
               { dv = dv, rows = A.combine_rows(dv) })
end
-- The kernels of a list marked for programmatic dependent launch (the driver keeps the mark on sm_90+ only): each of
-- them starts with KF_PDL_ENTRY or KF_PDL_WAIT (common/types.cuh), so the runtime may launch it while the previous
-- kernel of the stream finishes.
function A.pdl(ks)
  for _, k in ipairs(ks) do k.pdl = 1 end
  return ks
end

function A.combine_kernel(dv)
  return { name = "kf_attn_combine", threads = (dv // 4) * A.combine_rows(dv), smem = 0 }
end

-- The defines of the mma.sync forward kernel (attn/fwd.cuh) that decode and prefill share:
-- k has decode (0/1), tm, bn, wm, wn, stages, qreg and name (the kernel's name).
function A.fwd_defines(f, k)
  return subst([[
#define KF_BF16 ${bf16}
#define KF_D ${d}
#define KF_G ${g}
#define KF_CAUSAL ${causal}
#define KF_DECODE ${decode}
#define KF_TM ${tm}
#define KF_BN ${bn}
#define KF_WM ${wm}
#define KF_WN ${wn}
#define KF_STAGES ${stages}
#define KF_QREG ${qreg}
#define KF_MINB 1
#define KF_FWD_NAME ${name}
]], { bf16 = A.bf16(f), d = f.d, g = f.g, causal = f.causal, decode = k.decode, tm = k.tm, bn = k.bn,
      wm = k.wm, wn = k.wn, stages = k.stages, qreg = k.qreg, name = k.name })
end

-- Decode defaults: the packed query tile for G x Sq rows of one KV head.
-- The first of base + change (for each change in order, fields of the change replacing base's) that valid(p, f, dev)
-- accepts, else the last one tried: a default that must also fit a smaller device than the one it was tuned on.
function A.first_valid(valid, f, dev, base, changes)
  local c
  for _, q in ipairs(changes) do
    c = {}
    for k, v in pairs(base) do c[k] = v end
    for k, v in pairs(q) do c[k] = v end
    if valid(c, f, dev) then return c end
  end
  return c
end

function A.packed_rows(shape) return (shape.hq // shape.hkv) * shape.sq end
function A.tile_rows(rows) return (rows <= 16) and 16 or ((rows <= 32) and 32 or 64) end

-- Split-KV count: about one wave of CTAs (more splits measured slower; per_sm: CTAs an SM runs at once, default 1),
-- never fewer than min_keys (256) per split.
function A.splits(ctas, skv, dev, min_keys, per_sm)
  local best = 1
  local maxsp = math.max(1, skv // (min_keys or 256))
  for _, sp in ipairs({ 1, 2, 4, 8, 16, 32, 64, 128 }) do
    if sp <= maxsp and ctas * sp <= dev.sms * (per_sm or 1) then best = sp end
  end
  return best
end

return A
