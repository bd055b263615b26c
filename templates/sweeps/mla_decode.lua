-- sweeps/mla_decode.lua: DeepSeek-V3-style absorbed MLA decode: one latent KV head (latent 512 + rope 64, value = the latent), paged
-- Family attn_parts_decode (templates/attn_parts_decode.lua; reference tuner/ref_parts.h); not part of
-- default.lua (its distinct binaries would double test_compile_all's sm_90a time; that test compiles
-- them in their own case). Fields of a shape:
--   family     "attn_parts_decode"
--   dtype      "bf16": q, the cache and o (lse is fp32)
--   b          sequences; sq: query rows per sequence (1, or 2 for MTP / speculative decode)
--   skv        keys per sequence
--   hq         query heads; hkv: kv heads of every key part (1: the latent is one head shared by all)
--   parts      the key parts, in order, "<name><dim>" joined by "_": "latent512_rope64" is one cache row
--              of 576 = [latent 512 | rope 64]; score = q_latent . latent + q_rope . rope
--   value      "alias_latent": the value is the first dv columns of the latent part's rows (one cache,
--              read once), "separate": own value buffers
--   dv         columns of o: [b, sq, hq, 512]
--   layers     layers served by one pass over a shared cache (1: a plain call); MLA has no delta parts
--   page_size  keys per page of the block table [b, max_pages]; 0: contiguous
--   causal     1 when sq > 1 (bottom-right: row i sees keys j <= i + skv - sq), else 0
-- The softmax scale is a runtime argument given by the caller (DeepSeek-V3: mscale^2 / sqrt(192)),
-- not a shape field. b x skv <= 4M tokens: at most 4.5 GiB of cache (576 x 2 B per token).
-- Three (batch, keys) points per head count and Sq: one long sequence, a mid batch, and the issue's
-- B 128 x 4096 row; the runtime's nearest-winner selection covers the shapes between them (24 shapes,
-- about 2 minutes of tuning at --budget 24 on an H200; a full B x keys grid was 320 shapes, 20 minutes).
local shapes = {}
for _, hq in ipairs({ 16, 32, 64, 128 }) do
  for _, sq in ipairs({ 1, 2 }) do
    for _, bs in ipairs({ { 1, 32768 }, { 16, 8192 }, { 128, 4096 } }) do
      shapes[#shapes + 1] = { family = "attn_parts_decode", dtype = "bf16", b = bs[1], sq = sq, skv = bs[2],
                              hq = hq, hkv = 1, parts = "latent512_rope64", value = "alias_latent", dv = 512,
                              layers = 1, page_size = 64, causal = (sq > 1) and 1 or 0 }
    end
  end
end
return {
  doc = "absorbed MLA decode (DeepSeek-V3): latent 512 + rope 64, value = latent, Hq 16..128, Sq 1/2, (B, keys) = (1, 32K), (16, 8K), (128, 4K), page 64, bf16",
  shapes = shapes,
}
