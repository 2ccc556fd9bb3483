"""python -m basp: which libbasp this environment loads, what it was built with, and what can run here.

    python -m basp          a short report
    python -m basp --json   the same as one JSON object (for scripts and tests)

Exit status 0 when the library loads, 1 when it does not (the message says where it looked).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any, Dict, List, Optional

from . import _library
from .errors import Error


def _source(path: str) -> str:
    """Where the loaded file came from, in the loader's order."""
    if os.environ.get(_library.ENV_VAR):
        return "$%s" % _library.ENV_VAR
    if os.path.dirname(os.path.abspath(path)) == _library.PACKAGE_DIR:
        return "bundled in the package"
    if os.path.isabs(path):
        return "installed next to the package"
    return "the dynamic linker's search"


def _gpus() -> Dict[str, Any]:
    """The CUDA driver's device count (libcuda through ctypes: no PyTorch needed)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return {"driver": False, "devices": 0, "detail": "no CUDA driver (libcuda.so.1 not found)"}
    count = ctypes.c_int(0)
    rc = cuda.cuInit(0)
    if rc == 0:
        rc = cuda.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return {"driver": True, "devices": 0, "detail": "the CUDA driver reports error %d (no usable device)" % rc}
    return {"driver": True, "devices": count.value, "detail": "%d CUDA device(s)" % count.value}


def report() -> Dict[str, Any]:
    """Everything `python -m basp` prints, as a dict (raises OSError when no libbasp loads)."""
    _library.load()
    path = _library.path()
    version = ".".join(str(x) for x in _library.version())
    features = _library.features() if _library.has("basp_get_features") else {}
    nccl: Optional[Dict[str, Any]] = None
    if features.get("nccl"):
        try:
            code, file = _library.nccl_library()
            nccl = {"version": "%d.%d.%d" % (code // 10000, code // 100 % 100, code % 100), "code": code,
                    "library": file, "from_wheel": bool(_library.wheel_nccl()) and
                    os.path.realpath(file) == os.path.realpath(_library.wheel_nccl() or "")}
        except Error as e:
            nccl = {"error": str(e)}
    gpus = _gpus()
    mapped = _library.mapped_nccl_files()
    usable: List[str] = []
    if features.get("mpi"):
        usable.append("mpi")
    if features.get("nccl") and gpus["devices"] > 0:
        usable.append("nccl")
    return {"version": version, "library": os.path.realpath(path) if os.path.isabs(path) else path,
            "library_source": _source(path), "package": _library.PACKAGE_DIR, "features": features, "nccl": nccl,
            "nccl_files_mapped": mapped, "gpu": gpus, "usable_backends": usable}


def main(argv: List[str]) -> int:
    as_json = "--json" in argv
    try:
        info = report()
    except OSError as e:
        print("basp: %s" % e, file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    built = ", ".join("%s %s" % (k, "yes" if v else "no") for k, v in info["features"].items()) or "unknown"
    print("libbasp %s" % info["version"])
    print("  library   %s (%s)" % (info["library"], info["library_source"]))
    print("  package   %s" % info["package"])
    print("  built     %s" % built)
    if info["nccl"] is not None:
        n = info["nccl"]
        print("  nccl      %s" % (n["error"] if "error" in n else "%s from %s%s" % (
            n["version"], n["library"], " (PyTorch's nvidia-nccl wheel)" if n["from_wheel"] else "")))
    print("  gpu       %s" % info["gpu"]["detail"])
    print("  usable    %s" % (", ".join(info["usable_backends"]) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
