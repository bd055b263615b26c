"""python -m kforge doctor: which libkforge this package loads, its version, the device and the database.

    python -m kforge doctor [--device N] [--json]

Exit status 0 when the library loads (a machine without a GPU is reported, not an error), 1 when it
does not, 2 for bad usage.
"""
import argparse
import ctypes
import json
import os
import sys


def _cuda_device(ordinal):
    """(name, "major.minor", None) of a CUDA device through the driver (libcuda), or (None, None, why).
    kforge.h has no device query, so the driver is asked directly."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, None, f"no CUDA driver (libcuda.so.1: {e})"
    if cu.cuInit(0) != 0:
        return None, None, "cuInit failed (no CUDA device visible)"
    n = ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value <= ordinal:
        return None, None, f"no CUDA device {ordinal} ({n.value} visible)"
    dev = ctypes.c_int(0)
    if cu.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None, None, f"cuDeviceGet({ordinal}) failed"
    buf = ctypes.create_string_buffer(256)
    cu.cuDeviceGetName(buf, 256, dev)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # ..._MINOR
    return buf.value.decode(errors="replace"), f"{major.value}.{minor.value}", None


def doctor(device=0, import_torch=True):
    """A dict of what the package would use; never raises."""
    from . import api
    rep = {"package": os.path.dirname(os.path.abspath(__file__)), "python": sys.version.split()[0]}
    try:
        lib = api._load()
        rep["library"] = lib._kforge_path
        rep["version"] = lib.kf_version().decode()
        rep["jit"] = not os.path.basename(lib._kforge_path).startswith("libkforge_rt")
    except api.Error as e:
        rep["library"] = None
        rep["error"] = e.message
        return rep
    db = os.environ.get("KFORGE_DB") or None
    rep["database"] = db
    rep["database_exists"] = bool(db and os.path.exists(db))
    name, cc, why = _cuda_device(device)
    rep["device"] = None if name is None else {"ordinal": device, "name": name, "compute_capability": cc}
    if why:
        rep["device_note"] = why
    # kf_open says what kforge itself thinks of the device (and of the database, when it exists: a
    # missing one would be created, and doctor writes nothing)
    try:
        api.Context(device=device, db=db if rep["database_exists"] else None).close()
        rep["kf_open"] = "ok"
    except api.Error as e:
        rep["kf_open"] = f"{e.status_name}: {e.message}"
    from ._tensor import torch_module
    t = torch_module() if import_torch else sys.modules.get("torch")
    rep["torch"] = getattr(t, "__version__", None) if t is not None else None
    return rep


def _print(rep):
    if rep.get("library") is None:
        print("library:  not found")
        print(f"error:    {rep.get('error')}")
        return
    print(f"library:  {rep['library']}" + ("" if rep["jit"] else "  (runtime only: no JIT)"))
    print(f"version:  {rep['version']}")
    d = rep.get("device")
    if d:
        print(f"device:   {d['ordinal']}: {d['name']} (sm_{d['compute_capability'].replace('.', '')})")
    else:
        print(f"device:   none ({rep.get('device_note', '')})")
    db = rep.get("database")
    if db:
        print(f"database: {db}" + ("" if rep["database_exists"] else " (does not exist yet: kf_open creates it)")
              + "  ($KFORGE_DB)")
    else:
        print("database: none ($KFORGE_DB is not set: plans use the templates' defaults, compiled binaries are "
              "not kept)")
    print(f"kf_open:  {rep['kf_open']}")
    print(f"torch:    {rep['torch'] or 'not installed (the ops need it; the calls do not)'}")
    print(f"package:  {rep['package']} (python {rep['python']})")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m kforge", description="kforge's Python package")
    sub = p.add_subparsers(dest="cmd")
    d = sub.add_parser("doctor", help="print the library, its version, the device and the database")
    d.add_argument("--device", type=int, default=0)
    d.add_argument("--json", action="store_true")
    d.add_argument("--no-torch", action="store_true", help="do not import torch")
    a = p.parse_args(argv)
    if a.cmd != "doctor":
        p.print_usage(sys.stderr)
        print("error: a command is required: doctor", file=sys.stderr)
        return 2
    rep = doctor(a.device, import_torch=not a.no_torch)
    if a.json:
        print(json.dumps(rep, indent=1))
    else:
        _print(rep)
    return 0 if rep.get("library") else 1


if __name__ == "__main__":
    sys.exit(main())
