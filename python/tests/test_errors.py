"""Error translation: every non-KF_OK status becomes kforge.Error with .status and
kforge's own message (kf_errmsg). Against the stub library (a C compiler is enough) and
against the real build/libkforge.so when it exists and no GPU is present."""
import os
import unittest

import _util
import kforge


class TestStubErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def test_open_failure_surfaces_message(self):
        with self.assertRaises(kforge.Error) as cm:
            kforge.Context(device=3, db="x.db", bundles=("a.kfb", "b.kfb"), jit=False,
                           template_dir="/t", lib=self.stub)
        e = cm.exception
        self.assertEqual(e.status, kforge.KF_ERR_CUDA)
        self.assertEqual(e.status_name, "KF_ERR_CUDA")
        self.assertEqual(e.call, "kf_open")
        self.assertEqual(e.message, "no CUDA device: cuInit failed: CUDA_ERROR_NO_DEVICE (100) "
                                    "[device=3 db=x.db n_bundles=2 jit=1 tdir=/t bundle=a.kfb bundle=b.kfb]")
        self.assertEqual(str(e), "kf_open: KF_ERR_CUDA: " + e.message)

    def test_version(self):
        import kforge._lib as L
        lib = L.load(self.stub)
        self.assertEqual(lib.kf_version(), b"0.1.0")
        self.assertEqual(lib.kf_version_number(), 100)


class TestLibraryMissing(unittest.TestCase):
    def test_missing_library(self):
        from unittest import mock
        with mock.patch.dict(os.environ, {"KFORGE_LIB": "/nonexistent/libkforge.so"}):
            with self.assertRaises(kforge.LibraryNotFound) as cm:
                kforge.Context()
        self.assertIsInstance(cm.exception, kforge.Error)
        self.assertIsNone(cm.exception.status)
        self.assertIn("/nonexistent/libkforge.so", str(cm.exception))

    def test_candidates(self):
        from unittest import mock
        with mock.patch.dict(os.environ, {"KFORGE_LIB": "/x/libkforge.so"}):
            c = kforge.candidate_paths()
        self.assertEqual(c[0], "/x/libkforge.so")
        # the wheel's packaged library first, then one copied next to the package, then the build
        self.assertEqual(c[1], os.path.join(_util.PYDIR, "kforge", "lib", "libkforge.so"))
        self.assertEqual(c[2], os.path.join(_util.PYDIR, "kforge", "libkforge.so"))
        self.assertEqual(c[3], os.path.join(_util.REPO, "build", "libkforge.so"))


class TestRealLibrary(unittest.TestCase):
    """build/libkforge.so (or $KFORGE_LIB) without a GPU: kf_open fails with KF_ERR_CUDA."""

    @classmethod
    def setUpClass(cls):
        cls.lib = _util.real_lib()
        if cls.lib is None:
            raise unittest.SkipTest("skipped: build/libkforge.so not built (and KFORGE_LIB unset)")

    def test_version(self):
        import kforge._lib as L
        lib = L.load(self.lib)
        self.assertRegex(lib.kf_version().decode(), r"^\d+\.\d+\.\d+")
        self.assertEqual(lib.kf_version_number(), 100 * 0 + 1 * 100 + 0)
        self.assertEqual(lib.kf_status_str(99).decode(), "unknown status")
        self.assertTrue(lib.kf_status_str(kforge.KF_ERR_CUDA))

    def test_open_without_gpu(self):
        if _util.has_gpu():
            self.skipTest("skipped: a GPU is present, so kf_open may succeed (this checks the no-GPU path)")
        with self.assertRaises(kforge.Error) as cm:
            kforge.Context(device=0, lib=self.lib)
        e = cm.exception
        self.assertEqual(e.status, kforge.KF_ERR_CUDA, str(e))
        self.assertEqual(e.call, "kf_open")
        self.assertTrue(e.message.strip(), "kforge's message must surface in the exception")
        self.assertIn(e.message, str(e))


if __name__ == "__main__":
    unittest.main()


class TestDoctor(unittest.TestCase):
    """python -m kforge doctor names the library, its version, the device and the database (the stub
    library stands in; this machine may have no driver)."""

    def doctor(self, env, *args):
        import subprocess
        import sys
        e = {k: v for k, v in os.environ.items() if k not in ("KFORGE_LIB", "KFORGE_DB")}
        e.update(env)
        return subprocess.run([sys.executable, "-m", "kforge", "doctor", "--no-torch", *args], cwd=_util.PYDIR, env=e,
                              capture_output=True, text=True)

    def test_doctor__reports_library_device_database(self):
        stub = _util.build_stub()
        if stub is None:
            self.skipTest("skipped: no C compiler to build the stub library")
        r = self.doctor({"KFORGE_LIB": stub, "KFORGE_DB": "/nonexistent-dir/k.db"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
        self.assertEqual(lines["library"].strip(), stub)
        self.assertEqual(lines["version"].strip(), "0.1.0")
        self.assertIn("device", lines)
        self.assertIn("/nonexistent-dir/k.db (does not exist yet", lines["database"])
        self.assertFalse(os.path.exists("/nonexistent-dir/k.db"))   # doctor creates nothing
        r = self.doctor({"KFORGE_LIB": stub}, "--json")
        import json
        rep = json.loads(r.stdout)
        self.assertEqual((rep["library"], rep["version"], rep["database"]), (stub, "0.1.0", None))

    def test_doctor__no_library(self):
        r = self.doctor({"KFORGE_LIB": "/nonexistent/libkforge.so"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("library:  not found", r.stdout)
        self.assertIn("KFORGE_LIB='/nonexistent/libkforge.so' does not exist", r.stdout)
