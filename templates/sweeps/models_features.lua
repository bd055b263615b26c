-- sweeps/models_features.lua: the attention of current open models with their features (issue 21): sliding
-- windows, softcapping, attention sinks, FP8 K/V. bf16, one full (unsharded) layer:
--   Mistral-7B: 32/8, D 128, sliding window 4096 (prefill over 32K keys; decode B 32 at 32K keys)
--   Gemma-2-9B: 16/8, D 256, softcap 50 and window 4096 (the local layers; prefill 8K, decode B 32 at 8K)
--   gpt-oss-20B: 64/8, D 64, sinks and window 128 (the banded layers; prefill 8K, decode B 32 at 8K)
--   Llama-3-70B decode with FP8 (e4m3) K/V: 64/8, D 128, B 32 at 32K keys (and the 32/8 row of the figure)
-- Not yet in sweeps/models.lua: the tuner times these shapes with their features (and FP8 inputs), but its gate
-- checks big shapes against the GPU naive kernel, which has none of these features, and refuses to (the variant
-- is recorded as an error); `kforge compile --sweep models_features` builds them, `kforge run` times them.
local shapes = {}
local function add(fam, hq, hkv, d, b, sq, skv, extra)
  local s = { family = fam, dtype = "bf16", b = b, sq = sq, skv = skv, hq = hq, hkv = hkv, d = d, causal = 1 }
  for k, v in pairs(extra) do s[k] = v end
  shapes[#shapes + 1] = s
end
add("attn_prefill", 32, 8, 128, 1, 32768, 32768, { window = 4096 })                 -- Mistral-7B
add("attn_decode", 32, 8, 128, 32, 1, 32768, { window = 4096 })
add("attn_prefill", 16, 8, 256, 1, 8192, 8192, { window = 4096, softcap = 50 })     -- Gemma-2-9B
add("attn_decode", 16, 8, 256, 32, 1, 8192, { window = 4096, softcap = 50 })
add("attn_prefill", 64, 8, 64, 1, 8192, 8192, { window = 128, sinks = 1 })          -- gpt-oss-20B
add("attn_decode", 64, 8, 64, 32, 1, 8192, { window = 128, sinks = 1 })
add("attn_decode", 64, 8, 128, 32, 1, 32768, { kv_dtype = "e4m3" })                 -- Llama-3-70B FP8 K/V
add("attn_decode", 32, 8, 128, 32, 1, 32768, { kv_dtype = "e4m3" })
return {
  doc = "model features: Mistral-7B window 4096, Gemma-2-9B softcap 50 + window 4096, gpt-oss-20B sinks + window 128, FP8 K/V decode (Llama-3-70B)",
  shapes = shapes,
}
