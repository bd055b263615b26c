-- sweeps/models.lua: the attention shapes of current models, where tuning matters: GQA decode, speculative decode and causal prefill, MLA and KDA decode
-- Per GQA model (bf16, D 128): decode Sq 1 at batch 1/32/128 with 4K and 32K keys (not B 128 x 32K:
-- 17 GB of K/V filled on the host per shape, too slow to tune; the runtime's nearest winner covers
-- it), speculative decode Sq 2/4/8 at B 32 x 4K, causal prefill 2K/8K/32K. Head counts are those of
-- one full (unsharded) layer:
--   Llama-3 8B 32/8, Llama-3 70B 64/8, Qwen2.5-7B 28/4 (G 7), Qwen2.5-72B 64/8, Mistral Large 2 96/8 (G 12).
-- DeepSeek-V3 absorbed MLA (attn_parts_decode, latent 512 + rope 64, page 64): Hq 128 (one GPU) and
-- 16 (TP 8), Sq 1 and 2 (MTP), (B, keys) = (1, 32K), (32, 4K), (128, 4K).
-- Kimi-Linear KDA (K = V = 128, 32 heads): decode N 1/32/128, prefill T 2K/8K/32K.
-- With their model features (issue 21; bf16, one full layer; gated, as every big shape, against the GPU naive
-- kernel, built with the same features):
--   Mistral-7B: 32/8, D 128, sliding window 4096 (prefill over 32K keys; decode B 32 at 32K keys)
--   Gemma-2-9B: 16/8, D 256, softcap 50 and window 4096 (the local layers; prefill 8K, decode B 32 at 8K)
--   gpt-oss-20B: 64/8, D 64, sinks and window 128 (the banded layers; prefill 8K, decode B 32 at 8K)
--   Llama-3-70B decode with FP8 (e4m3) K/V: 64/8, D 128, B 32 at 32K keys (and the 32/8 row of the figure)
--   DeepSeek-V3 MLA with the FP8 latent cache (kv_dtype e4m3: e4m3 rows with one fp32 scale per token, issue 18):
--   Hq 16 and 128, Sq 1, B 128 at 4K keys, page 64 (the bf16 rows' issue figure)
local shapes = {}
local models = {
  { 32, 8 },    -- Llama-3 8B
  { 64, 8 },    -- Llama-3 70B, Qwen2.5-72B (same attention shape: listed once)
  { 28, 4 },    -- Qwen2.5-7B
  { 96, 8 },    -- Mistral Large 2
}
for _, m in ipairs(models) do
  local hq, hkv = m[1], m[2]
  local function decode(b, sq, skv)
    shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = sq, skv = skv, hq = hq, hkv = hkv,
                            d = 128, causal = (sq > 1) and 1 or 0 }
  end
  for _, b in ipairs({ 1, 32, 128 }) do
    for _, skv in ipairs({ 4096, 32768 }) do
      if not (b == 128 and skv == 32768) then decode(b, 1, skv) end
    end
  end
  for _, sq in ipairs({ 2, 4, 8 }) do decode(32, sq, 4096) end
  for _, n in ipairs({ 2048, 8192, 32768 }) do
    shapes[#shapes + 1] = { family = "attn_prefill", dtype = "bf16", b = 1, sq = n, skv = n, hq = hq, hkv = hkv,
                            d = 128, causal = 1 }
  end
end
local function mla(b, sq, skv, hq)
  -- the fields as sweeps/mla_decode.lua documents them
  shapes[#shapes + 1] = { family = "attn_parts_decode", dtype = "bf16", parts = "latent512_rope64",
                          value = "alias_latent", dv = 512, layers = 1, page_size = 64, hkv = 1,
                          b = b, sq = sq, skv = skv, hq = hq, causal = (sq > 1) and 1 or 0 }
end
for _, hq in ipairs({ 128, 16 }) do
  for _, sq in ipairs({ 1, 2 }) do
    mla(1, sq, 32768, hq)
    mla(32, sq, 4096, hq)
    mla(128, sq, 4096, hq)
  end
end
for _, hq in ipairs({ 16, 128 }) do   -- the FP8 latent cache
  mla(128, 1, 4096, hq)
  shapes[#shapes].kv_dtype = "e4m3"
end
for _, n in ipairs({ 1, 32, 128 }) do
  shapes[#shapes + 1] = { family = "kda_decode", n = n, t = 1, h = 32, hv = 32, dk = 128, dv = 128 }
end
for _, t in ipairs({ 2048, 8192, 32768 }) do
  shapes[#shapes + 1] = { family = "kda_prefill", n = 1, t = t, h = 32, hv = 32, dk = 128, dv = 128 }
end
local function feat(fam, hq, hkv, d, b, sq, skv, extra)
  local sh = { family = fam, dtype = "bf16", b = b, sq = sq, skv = skv, hq = hq, hkv = hkv, d = d, causal = 1 }
  for k, v in pairs(extra) do sh[k] = v end
  shapes[#shapes + 1] = sh
end
feat("attn_prefill", 32, 8, 128, 1, 32768, 32768, { window = 4096 })                 -- Mistral-7B
feat("attn_decode", 32, 8, 128, 32, 1, 32768, { window = 4096 })
feat("attn_prefill", 16, 8, 256, 1, 8192, 8192, { window = 4096, softcap = 50 })     -- Gemma-2-9B
feat("attn_decode", 16, 8, 256, 32, 1, 8192, { window = 4096, softcap = 50 })
feat("attn_prefill", 64, 8, 64, 1, 8192, 8192, { window = 128, sinks = 1 })          -- gpt-oss-20B
feat("attn_decode", 64, 8, 64, 32, 1, 8192, { window = 128, sinks = 1 })
feat("attn_decode", 64, 8, 128, 32, 1, 32768, { kv_dtype = "e4m3" })                 -- Llama-3-70B FP8 K/V
feat("attn_decode", 32, 8, 128, 32, 1, 32768, { kv_dtype = "e4m3" })
return {
  doc = "model shapes: GQA 32/8, 64/8, 28/4, 96/8 D128 decode (B 1/32/128, 4K/32K), spec decode Sq 2-8, causal prefill 2K-32K; DeepSeek-V3 MLA Hq 128/16 (and FP8 latent); Kimi-Linear KDA H32; Mistral-7B SWA, Gemma-2 softcap + window, gpt-oss sinks + window, FP8 K/V decode",
  shapes = shapes,
}
