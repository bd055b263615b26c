-- lib/llama3.lua: the Llama-3 attention sweeps (sweeps/llama3_8b.lua, sweeps/llama3_70b.lua): GQA hq/8, D 128,
-- bf16, decode at several batches and contexts, causal prefill. Used as import("lib/llama3.lua").sweep(hq, doc).
local M = {}

function M.sweep(hq, doc)
  local shapes = {}
  local function decode(b, skv)
    shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = 1, skv = skv, hq = hq, hkv = 8, d = 128, causal = 0 }
  end
  local function prefill(n)
    shapes[#shapes + 1] = { family = "attn_prefill", dtype = "bf16", b = 1, sq = n, skv = n, hq = hq, hkv = 8, d = 128, causal = 1 }
  end
  for _, skv in ipairs({ 4096, 32768, 131072 }) do decode(1, skv) end
  for _, skv in ipairs({ 8192, 32768 }) do decode(32, skv) end
  decode(128, 8192)
  for _, n in ipairs({ 1024, 4096, 16384 }) do prefill(n) end
  return { doc = doc, shapes = shapes }
end

return M
