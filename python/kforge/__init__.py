"""kforge: planned, tuned GPU attention kernels (a ctypes binding over libkforge).

    import torch, kforge
    ctx = kforge.Context(device=0, db="kforge.db")
    o = kforge.attention(q, k, v, causal=True, ctx=ctx)        # q [B, Sq, Hq, D], k/v [B, Skv, Hkv, D]
    o, s = kforge.kda(q, k, v, g, beta, initial_state=s0, final_state=True, ctx=ctx)  # Kimi Delta Attention
    o = kforge.mla_decode(q, kv_cache, block_table, cache_seqlens, ctx=ctx)      # FlashMLA's layouts
    import kforge.ops          # torch.library ops kforge::attention, kforge::kda, kforge::mla_decode
    import kforge.compat       # flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, sdpa

libkforge is found through $KFORGE_LIB, else the package's own kforge/lib/libkforge.so (what
pip install ./python ships), else next to this package, else ../build/libkforge.so relative to the
repository, install prefixes and the loader (python -m kforge doctor says which). Any non-KF_OK status raises
kforge.Error with .status and kforge's message.
"""
from ._lib import (KF_OK, KF_ERR_ARG, KF_ERR_UNSUPPORTED, KF_ERR_NOT_TUNED, KF_ERR_CUDA,
                   KF_ERR_NVRTC, KF_ERR_DB, KF_ERR_BUNDLE, KF_ERR_NOMEM, KF_BF16, KF_FP16,
                   KF_ATTN_PREFILL, KF_ATTN_DECODE, KF_JIT_ALLOW, KF_JIT_FORBID, STATUS_NAMES,
                   KF_KDA_PREFILL, KF_KDA_DECODE, KF_KDA_GATE_LOG, KF_KDA_GATE_SIGMOID, KF_KDA_STATE_KV,
                   KF_KDA_STATE_VK, KF_PARTS_VALUE_ALIAS, KF_PARTS_VALUE_SEPARATE, KF_KV_SAME, KF_KV_E4M3, kf_config,
                   kf_attn_desc,
                   kf_attn_tensors, kf_kda_desc, kf_kda_tensors, kf_parts_desc, kf_parts_view, kf_parts_tensors,
                   candidate_paths)
from .api import (Error, ArgumentError, LibraryNotFound, Context, Plan, Call, attention, prepare,
                  default_context, set_default_context, version, version_number, status_str, library_path)
from ._kda import KdaCall, kda, prepare_kda
from ._parts import PartsCall, mla_decode, parts_decode, prepare_mla, prepare_parts
from .api import split_kv_cache
from ._warmup import warmup

__version__ = "0.1.0"  # of this package; version() is the library's

__all__ = [
    "Error", "ArgumentError", "LibraryNotFound", "Context", "Plan", "Call", "attention", "prepare",
    "default_context", "set_default_context", "version", "version_number", "status_str", "library_path",
    "KdaCall", "kda", "prepare_kda", "PartsCall", "mla_decode", "parts_decode", "prepare_mla", "prepare_parts",
    "split_kv_cache", "warmup",
    "candidate_paths", "kf_config", "kf_attn_desc", "kf_attn_tensors", "kf_kda_desc", "kf_kda_tensors",
    "kf_parts_desc", "kf_parts_view", "kf_parts_tensors", "KF_PARTS_VALUE_ALIAS", "KF_PARTS_VALUE_SEPARATE",
    "STATUS_NAMES",
    "KF_OK", "KF_ERR_ARG", "KF_ERR_UNSUPPORTED", "KF_ERR_NOT_TUNED", "KF_ERR_CUDA",
    "KF_ERR_NVRTC", "KF_ERR_DB", "KF_ERR_BUNDLE", "KF_ERR_NOMEM", "KF_BF16", "KF_FP16",
    "KF_ATTN_PREFILL", "KF_ATTN_DECODE", "KF_JIT_ALLOW", "KF_JIT_FORBID",
    "KF_KDA_PREFILL", "KF_KDA_DECODE", "KF_KDA_GATE_LOG", "KF_KDA_GATE_SIGMOID", "KF_KDA_STATE_KV",
    "KF_KDA_STATE_VK",
]
