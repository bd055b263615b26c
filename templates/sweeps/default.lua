-- sweeps/default.lua: the shapes `kforge compile` and `kforge tune` use when no sweep is named
return {
  doc = "GQA shapes of the reference table (Llama-3 style 32/8), D 128",
  shapes = {
    { family = "attn_naive", dtype = "bf16", b = 1, sq = 1, skv = 131072, hq = 32, hkv = 8, d = 128, causal = 0 },
    { family = "attn_naive", dtype = "bf16", b = 1, sq = 16384, skv = 16384, hq = 32, hkv = 8, d = 128, causal = 1 },
  },
}
