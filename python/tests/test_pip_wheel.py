"""`pip wheel .` from the source tree, from nothing: a fresh CMake build of the library only (scikit-build-core,
pyproject.toml), as a user's `pip install .` makes it. No MPI job, no GPU.

- The wheel holds the package and basp/libbasp.so.0, and nothing of the C++ project besides (no headers, CMake
  package files, tests or tools); its version is the one of the source tree's CMakeLists.txt.
- Unpacked and imported without $BASP_LIBRARY, it loads its own library (`python -m basp --json`), which has the
  MPI backend (Open MPI is installed here) and, where this environment has PyTorch's nvidia-nccl wheel, was built
  against that NCCL and runs with it.

usage: python test_pip_wheel.py SOURCE_DIR (with an interpreter that has scikit-build-core: the torch venv)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

from basp import _library
from harness import check, run

SOURCE = os.path.abspath(sys.argv[1])


def test_wheel_from_nothing():
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        version = re.search(r"project\(basp VERSION ([0-9.]+)", f.read()).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "dist")
        env = dict(os.environ)
        env.pop("BASP_LIBRARY", None)
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
                                "-w", out, "-C", "build-dir=%s" % os.path.join(tmp, "build"), SOURCE],
                               capture_output=True, text=True, env=env)
        check.equal(build.returncode, 0, "pip wheel: %s" % (build.stdout[-3000:] + build.stderr[-3000:]))
        wheels = os.listdir(out)
        check.equal(len(wheels), 1, "one wheel made: %r" % wheels)
        check.true(wheels[0].startswith("basp-%s-" % version), "the wheel's version is %s: %s" % (version, wheels[0]))
        with zipfile.ZipFile(os.path.join(out, wheels[0])) as z:
            names = z.namelist()
            z.extractall(os.path.join(tmp, "site"))
        package = sorted(n for n in names if n.startswith("basp/"))
        check.true("basp/libbasp.so.0" in package, "the library is in the package: %r" % package)
        source_modules = sorted("basp/" + f for f in os.listdir(os.path.join(SOURCE, "python", "basp"))
                                if f.endswith(".py"))
        check.equal(package, sorted(source_modules + ["basp/libbasp.so.0"]), "the package's files")
        others = [n for n in names if not n.startswith(("basp/", "basp-%s.dist-info/" % version))]
        check.equal(others, [], "nothing but the package and its metadata")
        report = subprocess.run([sys.executable, "-m", "basp", "--json"], capture_output=True, text=True, cwd=tmp,
                                env=dict(env, PYTHONPATH=os.path.join(tmp, "site")))
        check.equal(report.returncode, 0, "python -m basp from the unpacked wheel: %s" % report.stderr)
        info = json.loads(report.stdout)
        check.equal(info["library"], os.path.realpath(os.path.join(tmp, "site", "basp", "libbasp.so.0")),
                    "the unpacked wheel loads its own library")
        check.equal(info["version"], version, "the library's version")
        check.true(info["features"]["mpi"], "the wheel's library has the MPI backend")
        wheel_nccl = _library.wheel_nccl()
        if info["features"]["nccl"] and wheel_nccl is not None:
            check.equal(info["nccl"]["library"], os.path.realpath(wheel_nccl), "it runs with the nvidia-nccl wheel's "
                        "NCCL")
            needed = subprocess.run(["readelf", "-d", os.path.join(tmp, "site", "basp", "libbasp.so.0")],
                                    capture_output=True, text=True).stdout
            check.true("[libnccl.so.2]" in needed, "it links libnccl.so.2: %s" % needed)
            check.true("NCCL: PyTorch's nvidia-nccl wheel in %s" % os.path.dirname(os.path.dirname(wheel_nccl))
                       in build.stdout + build.stderr, "CMake built against the nvidia-nccl wheel's NCCL")


if __name__ == "__main__":
    run(globals(), None, sys.argv[:1])
