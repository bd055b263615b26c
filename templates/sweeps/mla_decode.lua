-- sweeps/mla_decode.lua: DeepSeek-V3-style absorbed MLA decode: one latent KV head (latent 512 + rope 64, value = the latent), paged
-- Family attn_parts_decode (split-score decode, tuner/ref_parts.h); it has no template yet, so this sweep
-- is not part of default.lua. Fields of a shape:
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
--   layers     query groups of layers served by one pass over a shared cache (1: a plain call)
--   page_size  keys per page of the block table [b, max_pages]; 0: contiguous
--   causal     1 when sq > 1 (bottom-right: row i sees keys j <= i + skv - sq), else 0
-- The softmax scale is a runtime argument given by the caller (DeepSeek-V3: mscale^2 / sqrt(192)),
-- not a shape field. b x skv <= 4M tokens: at most 4.5 GiB of cache (576 x 2 B per token).
local shapes = {}
local max_tokens = 4 * 1024 * 1024
for _, hq in ipairs({ 16, 32, 64, 128 }) do
  for _, sq in ipairs({ 1, 2 }) do
    for _, b in ipairs({ 1, 2, 4, 8, 16, 32, 64, 128 }) do
      for _, skv in ipairs({ 1024, 4096, 8192, 16384, 32768 }) do
        if b * skv <= max_tokens then
          shapes[#shapes + 1] = { family = "attn_parts_decode", dtype = "bf16", b = b, sq = sq, skv = skv,
                                  hq = hq, hkv = 1, parts = "latent512_rope64", value = "alias_latent", dv = 512,
                                  layers = 1, page_size = 64, causal = (sq > 1) and 1 or 0 }
        end
      end
    end
  end
end
return {
  doc = "absorbed MLA decode (DeepSeek-V3): latent 512 + rope 64, value = latent, Hq 16..128, Sq 1/2, B 1..128, 1K..32K keys, page 64, bf16",
  shapes = shapes,
}
