-- attn_combine.lua: split-KV combine of fp32 partials (ws_o, ws_lse) into o (bf16/fp16) and lse
local A = import("lib/attn.lua")

local function valid(p, f, dev)
  if not A.dtype_ok(f.dtype) then return false, "dtype must be bf16 or fp16, got " .. tostring(f.dtype) end
  if f.dv % 8 ~= 0 or f.dv < 8 or f.dv > 1024 then return false, "dv must be a multiple of 8 in [8, 1024]" end
  if f.dv % p.vec ~= 0 then return false, "vec must divide dv" end
  local threads = f.dv // p.vec * p.rows
  if threads < 32 or threads > 1024 then return false, "threads per block " .. threads .. " not in [32, 1024]" end
  return true
end

return {
  family   = "attn_combine",
  doc      = "merge split-KV attention partials: O = sum_s exp(lse_s - LSE) O_s, LSE = logsumexp(lse_s)",
  includes = { "lib/attn.lua", "common/attn_params.h", "common/types.cuh", "attn/combine.cuh" },
  shape    = { dtype = "string", b = "int", sq = "int", hq = "int", dv = "int", sinks = "int?" },
  -- rows: (query row, head) rows per block; vec: columns per thread (dv / vec threads per row)
  params   = { rows = { 1, 2, 4, 8 }, vec = { 2, 4, 8 } },
  fixed    = function(shape)
    local f = { dtype = shape.dtype, dv = shape.dv }
    if shape.sinks ~= nil and shape.sinks ~= 0 then f.sink = 1 end   -- sink logits join the denominator
    return f
  end,
  valid    = valid,
  -- the decode families' rows (A.combine_rows) rounded down to a value of this space (dv 72: 7 -> 4) with vec 4;
  -- where that block is under a warp (dv < 16), the first valid of the rest of the space
  default  = function(shape, dev)
    local r = 1
    while r * 2 <= math.min(8, A.combine_rows(shape.dv)) do r = r * 2 end
    local changes = { {} }
    for _, vec in ipairs({ 4, 2, 8 }) do
      for _, rows in ipairs({ 8, 4, 2, 1 }) do changes[#changes + 1] = { rows = rows, vec = vec } end
    end
    return A.first_valid(valid, { dtype = shape.dtype, dv = shape.dv }, dev, { rows = r, vec = 4 }, changes)
  end,
  render   = function(p, f)
    return ((f.sink == 1) and "#define KF_ATTN_EXT 1\n#define KF_SINK 1\n" or "") .. subst("#define KF_BF16 ${bf16}\n#define KF_CMB_DV ${dv}\n#define KF_CMB_VEC ${vec}\n#define KF_CMB_ROWS ${rows}\n",
                 { bf16 = A.bf16(f), dv = f.dv, vec = p.vec, rows = p.rows })
      .. A.fragments({ "common/attn_params.h", "common/types.cuh", "attn/combine.cuh" })
  end,
  kernels  = function(p, f, dev)
    return { { name = "kf_attn_combine", threads = f.dv // p.vec * p.rows, smem = 0 } }
  end,
}
