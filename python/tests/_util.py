"""Helpers of the binding's CPU tests: import path, the stub library, fake device arrays."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

HEADER_DIR = os.path.join(REPO, "runtime")
_stub = None


def cc():
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build_stub():
    """Path of python/tests/stub_kforge.c built as a shared library (once per process), or
    None when no C compiler or no runtime/kforge.h is here."""
    global _stub
    if _stub is not None:
        return _stub or None
    compiler = cc()
    if not compiler or not os.path.exists(os.path.join(HEADER_DIR, "kforge.h")):
        _stub = ""
        return None
    out = os.path.join(tempfile.mkdtemp(prefix="kforge-stub-"), "libkforge_stub.so")
    subprocess.run([compiler, "-shared", "-fPIC", "-O0", "-std=c11", "-Wall", "-I", HEADER_DIR,
                    os.path.join(HERE, "stub_kforge.c"), "-o", out], check=True)
    _stub = out
    return out


def stub_or_skip():
    """build_stub(), or unittest.SkipTest when no C compiler is there to build it."""
    stub = build_stub()
    if stub is None:
        raise unittest.SkipTest("skipped: no C compiler to build the stub library")
    return stub

def real_lib():
    """The real libkforge the tests use: $KFORGE_LIB, else build/libkforge.so; None if absent."""
    p = os.environ.get("KFORGE_LIB") or os.path.join(REPO, "build", "libkforge.so")
    return p if os.path.exists(p) else None


def has_gpu():
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


class FakeArray:
    """Only a __cuda_array_interface__: the binding reads pointer, shape, strides and typestr
    from it and never dereferences the pointer (the stub library does not either)."""

    def __init__(self, shape, typestr="<f2", ptr=0x7f0000000000, strides=None, stream=None, descr=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream
        if descr is not None:
            self.__cuda_array_interface__["descr"] = descr


def itemsize(typestr):
    return int(typestr[2:])


def contiguous_bytes(shape, size):
    st, acc = [], size
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


class Untouchable:
    """A ctx that fails the test if the binding touches it (proves no C call was made)."""

    def __getattr__(self, name):
        raise AssertionError(f"the binding touched the context ({name}) before refusing the arguments")


class NoLibrary(unittest.TestCase):
    """A case whose calls must be refused before any library is loaded: $KFORGE_LIB points nowhere."""

    def setUp(self):
        from unittest import mock
        env = mock.patch.dict(os.environ, {"KFORGE_LIB": "/nonexistent/libkforge.so"})
        env.start()
        self.addCleanup(env.stop)

