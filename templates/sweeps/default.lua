-- sweeps/default.lua: the shapes `kforge compile` and `kforge tune` use when no sweep is named
-- The design.md reference rows on an H200 (bf16, D 128): decode (not causal) and causal prefill.
local shapes = {}
local function decode(b, hq, hkv, sq, skv)
  shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = sq, skv = skv, hq = hq, hkv = hkv,
                          d = 128, causal = 0 }
end
decode(1, 32, 8, 1, 131072)
decode(32, 32, 8, 1, 32768)
decode(128, 32, 8, 1, 8192)
decode(32, 32, 8, 4, 8192)
decode(1, 64, 8, 2, 131072)
decode(8, 8, 1, 4, 32768)
for _, n in ipairs({ 4096, 16384 }) do
  shapes[#shapes + 1] = { family = "attn_prefill", dtype = "bf16", b = 1, sq = n, skv = n, hq = 32, hkv = 8,
                          d = 128, causal = 1 }
end
return {
  doc = "GQA reference rows: decode 32/8, 64/8, 8/1 (Sq 1..4, 8K..128K keys) and causal prefill 32/8 at 4K and 16K, D 128",
  shapes = shapes,
}
