"""warmup(): make the plans of calls before a CUDA graph capture, without launching anything."""
from .api import ArgumentError


def _prepares():
    from . import api, _kda, _parts
    return {"attention": api.prepare, "kda": _kda.prepare_kda, "mla_decode": _parts.prepare_mla,
            "parts_decode": _parts.prepare_parts}


def warmup(call, *args, ctx=None, **kwargs):
    """Plans the call kforge.<call>(*args, **kwargs) would make, and launches nothing: call is "attention",
    "kda", "mla_decode" or "parts_decode" (or one of those functions). The torch ops (kforge.ops) forward
    to these calls, so a warmed call serves the op of the same arguments.
    The arguments are those of the call (tensors of the shapes and strides the captured calls will have;
    their contents are not read). Returns the bound call (its run() only enqueues). A plan is per shape:
    warm every shape a graph will capture. Raises kforge.Error."""
    name = call if isinstance(call, str) else getattr(call, "__name__", None)
    prepares = _prepares()
    if name not in prepares:
        raise ArgumentError(f"warmup: call must be one of {sorted(prepares)} (or that function); got {call!r}")
    from .api import attach_default
    return attach_default(prepares[name](*args, **kwargs), ctx)
