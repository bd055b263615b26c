-- sweeps/llama3_70b.lua: Llama-3 70B attention (GQA 64/8, D 128, bf16): decode at several batches and contexts, causal prefill
local shapes = {}
local function decode(b, skv)
  shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = 1, skv = skv, hq = 64, hkv = 8, d = 128, causal = 0 }
end
local function prefill(n)
  shapes[#shapes + 1] = { family = "attn_prefill", dtype = "bf16", b = 1, sq = n, skv = n, hq = 64, hkv = 8, d = 128, causal = 1 }
end
for _, skv in ipairs({ 4096, 32768, 131072 }) do decode(1, skv) end
for _, skv in ipairs({ 8192, 32768 }) do decode(32, skv) end
decode(128, 8192)
for _, n in ipairs({ 1024, 4096, 16384 }) do prefill(n) end
return {
  doc = "Llama-3 70B: GQA 64/8 D128 bf16, decode (b 1/32/128, 4K..128K keys) and causal prefill (1K..16K)",
  shapes = shapes,
}
