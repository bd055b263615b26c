"""Where the package finds libkforge when the user installed it: $KFORGE_LIB, the wheel's own
kforge/lib/libkforge.so, $KFORGE_PREFIX, the
prefix the package itself was installed under (pip and cmake --install into one prefix),
$LD_LIBRARY_PATH, the system loader (ctypes.util.find_library); the error names every place.
Each case runs a copy of the package in a fresh interpreter, away from this repository's build/,
with the stub library (a C compiler is enough) standing in for libkforge."""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest

import _util

PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from kforge import _lib
if len(sys.argv) > 2:             # stand-in for ldconfig's answer
    _lib._find_library = lambda name: sys.argv[2]
try:
    print("found", _lib.load()._kforge_path)
except _lib.LibraryNotFound as e:
    print("notfound", e)
"""


class TestFindLib(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stub = _util.stub_or_skip()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kforge-findlib-")
        self.addCleanup(shutil.rmtree, self.tmp)

    def package_at(self, site):
        """A copy of python/kforge under site (no library beside it); returns site."""
        shutil.copytree(os.path.join(_util.PYDIR, "kforge"), os.path.join(site, "kforge"),
                        ignore=shutil.ignore_patterns("*.so", "*.so.*", "__pycache__"))
        return site

    def lib_at(self, folder, name="libkforge.so"):
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        shutil.copy(self.stub, path)
        return path

    def probe(self, site, env=None, loader=None):
        e = {k: v for k, v in os.environ.items() if k not in ("KFORGE_LIB", "KFORGE_PREFIX", "LD_LIBRARY_PATH")}
        e.update(env or {})
        args = [sys.executable, "-c", PROBE, site] + ([loader] if loader else [])
        out = subprocess.run(args, env=e, capture_output=True, text=True, check=True).stdout.strip()
        return out.split(" ", 1)

    def test_find_lib__kforge_lib_missing_is_named(self):
        site = self.package_at(os.path.join(self.tmp, "site"))
        kind, msg = self.probe(site, {"KFORGE_LIB": "/nonexistent/libkforge.so"})
        self.assertEqual(kind, "notfound")
        self.assertIn("KFORGE_LIB='/nonexistent/libkforge.so' does not exist", msg)

    def test_find_lib__kforge_lib_wins(self):
        site = self.package_at(os.path.join(self.tmp, "site"))
        lib = self.lib_at(os.path.join(self.tmp, "elsewhere"), "libkforge_custom.so")
        self.lib_at(os.path.join(self.tmp, "p", "lib"))
        self.assertEqual(self.probe(site, {"KFORGE_LIB": lib, "KFORGE_PREFIX": os.path.join(self.tmp, "p")}),
                         ["found", lib])

    def test_find_lib__packaged_library_first(self):
        # what the wheel ships (kforge/lib/libkforge.so) wins over every searched place: a copy beside the
        # package, $KFORGE_PREFIX, the install prefix, $LD_LIBRARY_PATH
        prefix = os.path.join(self.tmp, "P")
        pyver = "python%d.%d" % sys.version_info[:2]
        site = self.package_at(os.path.join(prefix, "lib", pyver, "site-packages"))
        lib = self.lib_at(os.path.join(site, "kforge", "lib"))
        self.lib_at(os.path.join(site, "kforge"))
        self.lib_at(os.path.join(prefix, "lib"))
        self.lib_at(os.path.join(self.tmp, "kp", "lib"))
        self.lib_at(os.path.join(self.tmp, "ld"))
        self.assertEqual(self.probe(site, {"KFORGE_PREFIX": os.path.join(self.tmp, "kp"),
                                           "LD_LIBRARY_PATH": os.path.join(self.tmp, "ld")}), ["found", lib])

    def test_find_lib__kforge_prefix(self):
        site = self.package_at(os.path.join(self.tmp, "site"))
        prefix = os.path.join(self.tmp, "prefix")
        lib = self.lib_at(os.path.join(prefix, "lib"))
        self.assertEqual(self.probe(site, {"KFORGE_PREFIX": prefix}), ["found", lib])

    def test_find_lib__install_prefix_of_the_package(self):
        # pip install --prefix P ./python and cmake --install build --prefix P: P/lib/pythonX.Y/site-packages
        # holds the package, P/lib the library
        prefix = os.path.join(self.tmp, "P")
        pyver = "python%d.%d" % sys.version_info[:2]
        site = self.package_at(os.path.join(prefix, "lib", pyver, "site-packages"))
        lib = self.lib_at(os.path.join(prefix, "lib"), "libkforge.so.0")
        self.assertEqual(self.probe(site), ["found", lib])

    def test_find_lib__debian_dist_packages_and_lib64(self):
        prefix = os.path.join(self.tmp, "usr", "local")
        site = self.package_at(os.path.join(prefix, "lib", "python3", "dist-packages"))
        lib = self.lib_at(os.path.join(prefix, "lib64"))
        self.assertEqual(self.probe(site), ["found", lib])

    def test_find_lib__ld_library_path(self):
        site = self.package_at(os.path.join(self.tmp, "site"))
        d = os.path.join(self.tmp, "ldpath")
        lib = self.lib_at(d, "libkforge.so.0")
        self.assertEqual(self.probe(site, {"LD_LIBRARY_PATH": "/nonexistent" + os.pathsep + d}), ["found", lib])

    def test_find_lib__system_loader(self):
        # what ctypes.util.find_library answers (a name from ldconfig's cache) is loaded by the loader
        site = self.package_at(os.path.join(self.tmp, "site"))
        d = os.path.dirname(self.stub)
        name = os.path.basename(self.stub)
        kind, path = self.probe(site, {"LD_LIBRARY_PATH": d}, loader=name)
        self.assertEqual((kind, path), ("found", name))

    def test_find_lib__error_lists_every_place(self):
        for p in ("/usr/local/lib/libkforge.so", "/usr/local/lib/libkforge.so.0"):
            if os.path.exists(p):
                self.skipTest("skipped: %s is installed on this machine" % p)
        site = self.package_at(os.path.join(self.tmp, "site"))
        prefix = os.path.join(self.tmp, "empty")
        kind, msg = self.probe(site, {"KFORGE_PREFIX": prefix, "LD_LIBRARY_PATH": os.path.join(self.tmp, "ld")})
        self.assertEqual(kind, "notfound")
        for where in (os.path.join(site, "kforge", "lib", "libkforge.so") + " (the package's own",
                      os.path.join(site, "kforge", "libkforge.so") + " (next to the package)",
                      os.path.join(self.tmp, "build", "libkforge.so") + " (the repository's build)",
                      os.path.join(prefix, "lib", "libkforge.so") + " ($KFORGE_PREFIX)",
                      os.path.join(prefix, "lib64", "libkforge.so.0") + " ($KFORGE_PREFIX)",
                      os.path.join(self.tmp, "ld", "libkforge.so") + " ($LD_LIBRARY_PATH)",
                      os.path.join(sys.prefix, "lib", "libkforge.so") + " (sys.prefix)",
                      "the system loader (ctypes.util.find_library): no libkforge",
                      "/usr/local/lib/libkforge.so (cmake's default prefix)",
                      "set KFORGE_LIB"):
            self.assertIn(where, msg)


if __name__ == "__main__":
    unittest.main()
