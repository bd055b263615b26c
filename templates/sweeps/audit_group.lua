-- sweeps/audit_group.lua: the fixed-budget decode audit's four-layer group: base 128 + delta 32 joint scan vs GQA D 64, 2048 keys
-- Equal cache per token for a group of four layers (bf16 values, K and V):
--   GQA Hkv 4 D 64:          4 layers x 2 x 4 x 64             = 2048
--   base 128 + delta 32:     2 x 4 x 128 + 4 layers x 2 x 4 x 32 = 2048  (the base is shared by the group)
-- Fields of the attn_parts_decode rows (templates/attn_parts_decode.lua; not part of default.lua):
--   family     "attn_parts_decode"
--   dtype      "bf16"; b: sequences; sq: query rows per sequence; skv: keys per sequence
--   hq, hkv    query heads and kv heads PER LAYER (every key part has hkv heads: h -> h / (hq / hkv))
--   parts      the key parts "<name><dim>" joined by "_": "base128_delta32" = base 128 shared by the
--              layers of the group + delta 32 of each layer; score = q_base . k_base + q_delta . k_delta
--   value      "separate": value parts [v_base 128 | v_delta 32] in their own buffers
--   dv         columns of each layer's o: 160
--   layers     4: the joint scan, one pass over the base for the queries of four layers, each layer's
--              delta scores added before its own softmax, four outputs; 1: one layer per call (the
--              current KVPath-shared, called four times per group)
--   page_size  0: contiguous static cache (as in the audit)
--   causal     0 (sq 1)
-- The GQA control rows are attn_decode (one layer per call: time x 4 for the group).
local shapes = {}
for _, b in ipairs({ 1, 8, 32, 128 }) do
  for _, layers in ipairs({ 4, 1 }) do
    shapes[#shapes + 1] = { family = "attn_parts_decode", dtype = "bf16", b = b, sq = 1, skv = 2048, hq = 8, hkv = 4,
                            parts = "base128_delta32", value = "separate", dv = 160, layers = layers,
                            page_size = 0, causal = 0 }
  end
  shapes[#shapes + 1] = { family = "attn_decode", dtype = "bf16", b = b, sq = 1, skv = 2048, hq = 8, hkv = 4,
                          d = 64, causal = 0 }
end
return {
  doc = "decode audit group: base 128 + delta 32 (layers 4 joint and 1), Hq 8 / Hkv 4 per layer, vs GQA D 64 control; B 1/8/32/128, 2048 keys, bf16",
  shapes = shapes,
}
