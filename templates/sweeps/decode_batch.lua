-- sweeps/decode_batch.lua: decode over batch 1..256 x context 1K..128K (GQA 32/8 D128 bf16), up to 2M cached tokens per call
-- The cap keeps K+V at most 8 GiB (2M tokens x 8 heads x 128 x 2 B x 2): the tuner fills the
-- timing inputs on the host once per variant, and larger calls only repeat the memory-bound regime.
local shapes = {}
local max_tokens = 2 * 1024 * 1024
for _, b in ipairs({ 1, 2, 4, 8, 16, 32, 64, 128, 256 }) do
  for _, skv in ipairs({ 1024, 4096, 16384, 32768, 65536, 131072 }) do
    if b * skv <= max_tokens then
      shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = 1, skv = skv, hq = 32, hkv = 8, d = 128, causal = 0 }
    end
  end
end
return {
  doc = "decode: batch 1..256 x context 1K..128K (b x skv <= 2M tokens), GQA 32/8 D128 bf16",
  shapes = shapes,
}
