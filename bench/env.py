"""The environment recorded with every run: GPU (name, UUID, compute capability, SMs, L2),
driver, clocks at start (nvidia-smi), torch / CUDA / cuDNN / triton versions, NVRTC, kforge
(binding, library, git revision), date, host. Every probe is optional: a missing tool
leaves its field null, never fails the run."""
import ctypes
import os
import platform
import shutil
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMI_FIELDS = ["index", "name", "uuid", "driver_version", "pci.bus_id", "pstate", "clocks.sm",
              "clocks.mem", "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
              "temperature.gpu", "power.draw", "power.limit", "persistence_mode", "compute_mode",
              "mig.mode.current", "memory.used", "memory.total", "utilization.gpu"]


def _run(cmd, timeout=20):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.stdout if p.returncode == 0 else None
    except Exception:
        return None


def nvidia_smi(uuid=None):
    """Fields of the GPU with this UUID (or the only/first one) from nvidia-smi; {} without it."""
    if not shutil.which("nvidia-smi"):
        return {}
    rows = []
    # query the fields one set at a time is slower; ask all, and fall back field by field
    txt = _run(["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"])
    if txt:
        for line in txt.strip().splitlines():
            vals = [v.strip() for v in line.split(",")]
            if len(vals) == len(SMI_FIELDS):
                rows.append(dict(zip(SMI_FIELDS, vals)))
    if not rows:  # an old driver refusing one field: ask the essential ones
        base = ["index", "name", "uuid", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm"]
        txt = _run(["nvidia-smi", "--query-gpu=" + ",".join(base), "--format=csv,noheader,nounits"])
        for line in (txt or "").strip().splitlines():
            vals = [v.strip() for v in line.split(",")]
            if len(vals) == len(base):
                rows.append(dict(zip(base, vals)))
    if not rows:
        return {}
    if uuid:
        want = _norm_uuid(uuid)
        for r in rows:
            if _norm_uuid(r.get("uuid", "")) == want:
                return r
    if len(rows) == 1:
        return rows[0]
    return {"ambiguous": True, "all": rows}


def _norm_uuid(u):
    u = str(u).lower()
    if u.startswith("gpu-"):
        u = u[4:]
    return u.replace("-", "")


def git_rev():
    out = {"git_rev": None, "git_dirty": None}
    if not shutil.which("git"):
        return out
    rev = _run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"])
    if rev:
        out["git_rev"] = rev.strip()
        st = _run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
        out["git_dirty"] = bool(st and st.strip())
    return out


def nvrtc_version():
    names = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"]
    try:  # the copy that ships with the torch wheels
        import nvidia.cuda_nvrtc as m  # type: ignore
        d = os.path.join(list(m.__path__)[0], "lib")
        names = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.startswith("libnvrtc.so")] + names
    except Exception:
        pass
    for n in names:
        try:
            lib = ctypes.CDLL(n)
            major, minor = ctypes.c_int(), ctypes.c_int()
            if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0:
                return f"{major.value}.{minor.value}"
        except Exception:
            continue
    return None


def kforge_info(db=None):
    info = {"version": None, "library": None, "library_mtime": None, "binding": None, "db": db,
            "db_exists": bool(db and os.path.exists(db))}
    info.update(git_rev())
    try:
        import kforge
        info["binding"] = kforge.__version__
        info["binding_path"] = os.path.dirname(kforge.__file__)
        info["version"] = kforge.version()
        info["library"] = kforge.library_path()
        info["library_mtime"] = time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                              time.gmtime(os.path.getmtime(info["library"])))
    except Exception as e:
        info["error"] = f"{type(e).__name__}: {e}"
    info["build_rev"] = build_rev(info.get("library"))
    return info


def build_rev(library):
    """The revision the library was built from, as `kforge --version` beside it says it
    ("3e788492365b", "-dirty" when built from a modified tree): a tree copied to another machine
    may carry an older .git than the code it runs."""
    exe = os.path.join(os.path.dirname(library), "kforge") if library else None
    if not exe or not os.access(exe, os.X_OK):
        return None
    out = _run([exe, "--version"])
    if out and "(" in out and out.rstrip().endswith(")"):
        return out.rstrip()[out.index("(") + 1:-1]
    return None


def collect(device_index=0, args=None):
    import torch
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": socket.gethostname(),
           "python": sys.version.split()[0], "platform": platform.platform()}
    if device_index is None:  # CPU dry run
        env["gpu"] = {"name": "cpu (dry run)"}
        env["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": None}
        env["kforge"] = kforge_info(getattr(args, "db", None))
        return env
    props = torch.cuda.get_device_properties(device_index)
    gpu = {"index": device_index, "name": props.name, "cc": f"{props.major}.{props.minor}",
           "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory,
           "l2_bytes": getattr(props, "L2_cache_size", None), "uuid": None}
    u = getattr(props, "uuid", None)
    if u is not None:
        gpu["uuid"] = "GPU-" + str(u) if not str(u).startswith("GPU-") else str(u)
    env["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    smi = nvidia_smi(gpu["uuid"])
    if not gpu["uuid"] and smi.get("uuid"):
        gpu["uuid"] = smi["uuid"]
    env["gpu"] = gpu
    env["nvidia_smi_start"] = smi
    env["driver"] = smi.get("driver_version")
    if not env["driver"]:
        try:
            with open("/proc/driver/nvidia/version") as f:
                env["driver"] = f.readline().strip()
        except Exception:
            pass
    env["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    env["nvrtc"] = nvrtc_version()
    env["kforge"] = kforge_info(getattr(args, "db", None))
    return env


# ---- clocks and power while contenders run (NVML through ctypes; absent: None) ------------------
class Nvml:
    """SM clock (MHz), board power (W) and temperature (C) of one GPU through libnvidia-ml.so.1
    ($KFORGE_NVML_LIB names another file; a path that does not exist stands for no NVML).
    Without NVML, or for a GPU it does not know, read() gives None: never an error."""

    def __init__(self, uuid=None, index=0):
        self.why = None
        self._lib = self._h = None
        name = os.environ.get("KFORGE_NVML_LIB") or "libnvidia-ml.so.1"
        try:
            lib = ctypes.CDLL(name)
            if lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit_v2 failed")
            h = ctypes.c_void_p()
            rc = (lib.nvmlDeviceGetHandleByUUID(str(uuid).encode(), ctypes.byref(h)) if uuid
                  else lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(h)))
            if rc != 0:
                raise OSError(f"no NVML device for {uuid or index} (NVML {rc})")
            self._lib, self._h = lib, h
        except Exception as e:
            self.why = f"{name}: {e}"

    @property
    def ok(self):
        return self._h is not None

    def read(self):
        """(sm_mhz, power_w, temp_c), each None when NVML does not give it; None without NVML."""
        if not self.ok:
            return None
        v = ctypes.c_uint()
        sm = float(v.value) if self._lib.nvmlDeviceGetClockInfo(self._h, 1, ctypes.byref(v)) == 0 else None
        pw = v.value / 1000.0 if self._lib.nvmlDeviceGetPowerUsage(self._h, ctypes.byref(v)) == 0 else None
        t = float(v.value) if self._lib.nvmlDeviceGetTemperature(self._h, 0, ctypes.byref(v)) == 0 else None
        return sm, pw, t


class ClockSampler:
    """Reads an Nvml every period_s in a thread between start() and stop(); stop() returns
    {sm_mhz_mean, sm_mhz_min, power_w_mean, power_w_max, temp_c_max, readings} (values None when
    nothing was read: unknown)."""

    def __init__(self, nvml, period_s=0.005):
        self.nvml, self.period = nvml, period_s
        self._th = None
        self._stop = None
        self.readings = []

    def start(self):
        import threading
        self.readings = []
        if not (self.nvml and self.nvml.ok):
            return self
        self._stop = threading.Event()

        def loop():
            while True:
                r = self.nvml.read()
                if r:
                    self.readings.append(r)
                if self._stop.wait(self.period):
                    return

        self._th = threading.Thread(target=loop, daemon=True)
        self._th.start()
        return self

    def stop(self):
        if self._th:
            self._stop.set()
            self._th.join()
            self._th = None
        return clock_summary(self.readings)


def clock_summary(readings):
    sm = [r[0] for r in readings if r and r[0] is not None]
    pw = [r[1] for r in readings if r and r[1] is not None]
    tc = [r[2] for r in readings if r and r[2] is not None]
    return {"sm_mhz_mean": sum(sm) / len(sm) if sm else None, "sm_mhz_min": min(sm) if sm else None,
            "power_w_mean": sum(pw) / len(pw) if pw else None, "power_w_max": max(pw) if pw else None,
            "temp_c_max": max(tc) if tc else None, "readings": len(readings)}
