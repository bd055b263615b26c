-- sweeps/prefill.lua: causal prefill from 1K to 32K tokens (GQA 32/8 D128), plus D64 and D256 of the reference table
local shapes = {}
local function add(n, d, hq, hkv)
  shapes[#shapes + 1] = { family = "attn_prefill", dtype = "bf16", b = 1, sq = n, skv = n, hq = hq, hkv = hkv, d = d, causal = 1 }
end
for _, n in ipairs({ 1024, 2048, 4096, 8192, 16384, 32768 }) do add(n, 128, 32, 8) end
add(8192, 64, 32, 8)
add(4096, 256, 32, 8)
add(4096, 128, 64, 8)
return {
  doc = "causal prefill 1K..32K tokens at GQA 32/8 D128 bf16, plus D64 8K, D256 4K and 64/8 4K",
  shapes = shapes,
}
