-- sweeps/decode_spec.lua: speculative decoding: Sq 2..8 query rows per sequence (causal, bottom-right), GQA 32/8, 64/8 and MQA 8/1
local shapes = {}
local function add(b, sq, skv, hq, hkv)
  shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = sq, skv = skv, hq = hq, hkv = hkv, d = 128, causal = 1 }
end
for sq = 2, 8 do add(32, sq, 8192, 32, 8) end
add(1, 2, 131072, 64, 8)
add(1, 4, 131072, 64, 8)
add(8, 4, 32768, 8, 1)
add(8, 8, 32768, 8, 1)
return {
  doc = "speculative decode: Sq 2..8 (causal) at 32/8 b32 8K, 64/8 b1 128K, MQA 8/1 b8 32K; D128 bf16",
  shapes = shapes,
}
