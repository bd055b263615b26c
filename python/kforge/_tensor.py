"""What the binding needs to know about a device array: pointer, shape, element strides,
dtype, device. Accepts torch tensors, anything with __cuda_array_interface__, and (when
torch is importable) anything with __dlpack__. Never touches libkforge."""
import sys


class TensorInfo:
    __slots__ = ("name", "ptr", "shape", "strides", "dtype", "device", "obj", "is_torch", "stream")

    def __init__(self, name, ptr, shape, strides, dtype, device, obj, is_torch, stream=None):
        self.name = name
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = dtype          # "bf16", "fp16", "fp32", "int32", "int64", "e4m3", or a description of another type
        self.device = device        # CUDA ordinal, or None when unknown
        self.obj = obj              # keeps the memory alive
        self.is_torch = is_torch
        self.stream = stream        # __cuda_array_interface__ v3 producer stream, else None

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return (f"TensorInfo({self.name}: {self.dtype} shape={self.shape} strides={self.strides} "
                f"device={self.device})")


ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4, "int64": 8, "e4m3": 1}


def view(t, name, offset, shape, strides):
    """A TensorInfo for a view into t's memory (no copy): offset in elements from t's pointer, its own
    shape and element strides. Keeps t's object alive."""
    size = ITEMSIZE.get(t.dtype)
    if size is None:
        raise InterfaceError(f"{name}: cannot take a view of dtype {t.dtype}")
    return TensorInfo(name, t.ptr + offset * size, shape, strides, t.dtype, t.device, t.obj, t.is_torch, t.stream)


def last_dim_slice(t, name, start, width):
    """t[..., start:start + width] as a TensorInfo (no copy)."""
    return view(t, name, start, t.shape[:-1] + (width,), t.strides)


def torch_module():
    """torch if it is already imported or importable, else None (imported lazily: the
    binding works without torch)."""
    t = sys.modules.get("torch")
    if t is not None:
        return t
    try:
        import torch  # noqa: F401
        return sys.modules["torch"]
    except Exception:
        return None


def _is_torch_tensor(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int32": "int32", "int64": "int64",
                 "float8_e4m3fn": "e4m3"}

_TYPESTR = {"f2": "fp16", "f4": "fp32", "i4": "int32", "i8": "int64"}


class InterfaceError(ValueError):
    pass


def _from_torch(name, x):
    dname = str(x.dtype).replace("torch.", "")
    dtype = _TORCH_DTYPES.get(dname, dname)
    if x.device.type != "cuda":
        raise InterfaceError(f"{name}: a CUDA tensor is required, got a tensor on {x.device}")
    return TensorInfo(name, x.data_ptr(), x.shape, x.stride(), dtype, x.device.index, x, True)


def _from_cai(name, x):
    cai = x.__cuda_array_interface__
    shape = tuple(cai["shape"])
    typestr = cai["typestr"]
    code = typestr[1:] if typestr[:1] in "<>|=" else typestr
    if typestr[:1] == ">":
        raise InterfaceError(f"{name}: big-endian data ({typestr}) is not supported")
    dtype = _TYPESTR.get(code)
    if dtype is None and code == "V2":
        descr = cai.get("descr") or []
        names = " ".join(str(d[0]) for d in descr if d)
        if "bfloat16" in names or "bf16" in names:
            dtype = "bf16"
    if dtype is None and code == "V1":   # FP8: a one-byte void type whose descr names it
        descr = cai.get("descr") or []
        names = " ".join(str(d[0]) for d in descr if d)
        if "e4m3" in names:
            dtype = "e4m3"
    if dtype is None:
        dtype = "typestr " + typestr
    itemsize = int(code[1:]) if code[1:].isdigit() else 0
    ptr = cai["data"][0] if cai.get("data") else 0
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        el, acc = [], 1
        for s in reversed(shape):
            el.append(acc)
            acc *= s
        el_strides = tuple(reversed(el))
    else:
        if itemsize <= 0:
            raise InterfaceError(f"{name}: cannot convert byte strides of typestr {typestr}")
        bad = [s for s in strides if s % itemsize]
        if bad:
            raise InterfaceError(f"{name}: byte strides {tuple(strides)} are not multiples of "
                                 f"the element size {itemsize}")
        el_strides = tuple(s // itemsize for s in strides)
    return TensorInfo(name, ptr or 0, shape, el_strides, dtype, None, x, False, cai.get("stream"))


def describe(name, x):
    """TensorInfo for x, or InterfaceError (a ValueError) when x is no device array."""
    if _is_torch_tensor(x):
        return _from_torch(name, x)
    if hasattr(x, "__cuda_array_interface__"):
        return _from_cai(name, x)
    if hasattr(x, "__dlpack__"):
        torch = torch_module()
        if torch is None:
            raise InterfaceError(f"{name}: a DLPack object needs torch to be read; "
                                 "pass a torch tensor or an object with __cuda_array_interface__")
        return _from_torch(name, torch.utils.dlpack.from_dlpack(x))
    raise InterfaceError(f"{name}: expected a CUDA tensor (torch, __cuda_array_interface__ "
                         f"or DLPack), got {type(x).__name__}")
