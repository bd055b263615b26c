-- sweeps/llama3_8b.lua: Llama-3 8B attention (GQA 32/8, D 128, bf16): decode at several batches and contexts, causal prefill
-- The rows are those of lib/llama3.lua at 32 query heads.
return import("lib/llama3.lua").sweep(32,
  "Llama-3 8B: GQA 32/8 D128 bf16, decode (b 1/32/128, 4K..128K keys) and causal prefill (1K..16K)")
