"""The basp wheel as installed in a virtual environment (scripts/python/env.sh --install BUILD), no MPI.

- The interpreter imports basp from its site-packages, not from a source tree, and loads the libbasp bundled in
  the package; that library is this build tree's (same GNU build id) and the package's files are the source
  tree's (byte for byte): a stale install fails here, naming the command that refreshes it.
- The loader's order: $BASP_LIBRARY first, then the bundled copy.
- `python -m basp` (and --json) reports the version of the source tree's CMakeLists.txt, the bundled library and
  what the build has.
- With PyTorch's nvidia-nccl wheel in the environment, libbasp runs with that libnccl, and importing basp and
  torch in either order maps exactly one libnccl into the process. A second, different libnccl mapped into the
  process makes Comm.from_nccl refuse (before the communicator is touched).

usage: python test_wheel.py BUILD_TREE_LIBBASP SOURCE_PACKAGE_DIR
"""
import json
import os
import re
import subprocess
import sys
import sysconfig

import basp
from basp import _library
from harness import check, run

BUILD_LIB = os.path.abspath(sys.argv[1])
SOURCE_PKG = os.path.abspath(sys.argv[2])
REFRESH = "refresh the install with scripts/python/env.sh --install <build dir>"


def build_id(path):
    """The GNU build id of an ELF file (readelf -n), which strip keeps."""
    out = subprocess.run(["readelf", "-n", path], check=True, capture_output=True, text=True).stdout
    found = re.search(r"Build ID: ([0-9a-f]+)", out)
    check.true(found is not None, "%s has a GNU build id" % path)
    return found.group(1)


def python(code, env=None):
    """Runs `code` in a fresh interpreter of this environment; returns its stdout (fails on a non-zero exit)."""
    full = dict(os.environ)
    full.pop("BASP_LIBRARY", None)
    full.update(env or {})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd="/")
    check.equal(done.returncode, 0, "python -c %r failed: %s" % (code[:60], done.stderr[-2000:]))
    return done.stdout


def test_imported_from_site_packages():
    site = os.path.realpath(sysconfig.get_paths()["platlib"])
    package = os.path.realpath(os.path.dirname(basp.__file__))
    check.equal(os.path.dirname(package), site, "basp is imported from this interpreter's site-packages")
    check.true(os.environ.get("BASP_LIBRARY") is None, "the test runs without $BASP_LIBRARY")
    bundled = os.path.join(package, "libbasp.so.0")
    check.equal(os.path.realpath(basp.library_path()), bundled, "the library loaded is the one bundled in the wheel")


def test_install_is_this_tree():
    installed = os.path.join(os.path.dirname(basp.__file__), "libbasp.so.0")
    check.equal(build_id(installed), build_id(BUILD_LIB), "the wheel's libbasp is %s (%s)" % (BUILD_LIB, REFRESH))
    package = os.path.dirname(basp.__file__)
    source = sorted(f for f in os.listdir(SOURCE_PKG) if f.endswith(".py"))
    ours = sorted(f for f in os.listdir(package) if f.endswith(".py"))
    check.equal(ours, source, "the wheel's modules are the source tree's (%s)" % REFRESH)
    for name in source:
        with open(os.path.join(SOURCE_PKG, name), "rb") as a, open(os.path.join(package, name), "rb") as b:
            check.true(a.read() == b.read(), "%s differs from the source tree's (%s)" % (name, REFRESH))


def test_load_order():
    out = python("import basp; print(basp.library_path())", {"BASP_LIBRARY": BUILD_LIB})
    check.equal(out.strip(), BUILD_LIB, "$BASP_LIBRARY wins over the bundled copy")
    out = python("import basp, os; print(os.path.dirname(basp.library_path()) == os.path.dirname(basp.__file__))")
    check.equal(out.strip(), "True", "without $BASP_LIBRARY the bundled copy is loaded")


def test_main_reports():
    with open(os.path.join(SOURCE_PKG, os.pardir, os.pardir, "CMakeLists.txt")) as f:
        version = re.search(r"project\(basp VERSION ([0-9.]+)", f.read()).group(1)
    full = dict(os.environ)
    full.pop("BASP_LIBRARY", None)
    text = subprocess.run([sys.executable, "-m", "basp"], capture_output=True, text=True, env=full, cwd="/")
    check.equal(text.returncode, 0, "python -m basp: %s" % text.stderr)
    check.true(text.stdout.startswith("libbasp %s\n" % version), "the report starts with the version: %r" % text.stdout)
    check.true("(bundled in the package)" in text.stdout, "the report says where the library came from")
    raw = subprocess.run([sys.executable, "-m", "basp", "--json"], capture_output=True, text=True, env=full,
                         cwd="/")
    info = json.loads(raw.stdout)
    check.equal(info["version"], version, "--json version")
    check.equal(info["library_source"], "bundled in the package", "--json library_source")
    check.equal(sorted(info["features"]), ["cuda", "hwloc", "mpi", "nccl"], "--json features")
    check.true(info["features"]["mpi"], "the wheel built here has the MPI backend (Open MPI is installed)")
    check.equal("mpi" in info["usable_backends"], True, "MPI is usable here")
    check.equal("nccl" in info["usable_backends"], info["gpu"]["devices"] > 0 and info["features"]["nccl"],
                "NCCL counts as usable only with a GPU")
    bad = subprocess.run([sys.executable, "-m", "basp"], capture_output=True, text=True, cwd="/",
                         env=dict(full, BASP_LIBRARY="/nonexistent/libbasp.so.0"))
    check.equal(bad.returncode, 1, "python -m basp exits 1 when no library loads")
    check.true("/nonexistent/libbasp.so.0" in bad.stderr, "and names where it looked: %r" % bad.stderr)


def test_one_nccl_with_torch():
    if not basp.features()["nccl"]:
        check.true(True, "a build without NCCL: nothing to check")
        return
    wheel = _library.wheel_nccl()
    version, ours = basp.nccl_library()
    check.true(version >= 20000, "ncclGetVersion through libbasp: %d" % version)
    if wheel is None:
        check.true(os.path.exists(ours), "libbasp's libnccl is a file: %s" % ours)
        return
    check.equal(os.path.realpath(ours), os.path.realpath(wheel), "libbasp runs with the nvidia-nccl wheel's NCCL")
    probe = ("import basp._library as L, json; print(json.dumps(L.mapped_nccl_files()))")
    for order in ("import basp; basp.version(); import torch", "import torch; import basp; basp.version()"):
        mapped = json.loads(python(order + "\n" + probe).strip().splitlines()[-1])
        check.equal(mapped, [os.path.realpath(wheel)], "libnccl files mapped after `%s`" % order)


def test_from_nccl_refuses_a_second_nccl():
    if not basp.features()["nccl"]:
        check.true(True, "a build without NCCL: nothing to check")
        return
    _, ours = basp.nccl_library()
    other = next((p for p in ("/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                              "/usr/lib/x86_64-linux-gnu/libnccl.so.2")
                  if os.path.exists(p) and os.path.realpath(p) != os.path.realpath(ours)), None)
    if other is None:
        check.true(True, "no second libnccl on this machine to load")
        return
    code = ("import ctypes, basp\nbasp.version()\nctypes.CDLL(%r)\n"
            "try:\n    basp.Comm.from_nccl(1, micro_batch=1)\n    print('accepted')\n"
            "except basp.Error as e:\n    print(e.status, e.message)\n" % other)
    out = python(code).strip()
    check.true(out.startswith("%d " % basp.Status.ERROR_INVALID_ARGUMENT), "from_nccl refused: %r" % out)
    check.true(os.path.realpath(other) in out and "besides the libnccl libbasp uses" in out,
               "the error names the other libnccl: %r" % out)


if __name__ == "__main__":
    run(globals(), None, sys.argv[:1])
