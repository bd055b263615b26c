-- sweeps/llama3_70b.lua: Llama-3 70B attention (GQA 64/8, D 128, bf16): decode at several batches and contexts, causal prefill
-- The rows are those of lib/llama3.lua at 64 query heads.
return import("lib/llama3.lua").sweep(64,
  "Llama-3 70B: GQA 64/8 D128 bf16, decode (b 1/32/128, 4K..128K keys) and causal prefill (1K..16K)")
