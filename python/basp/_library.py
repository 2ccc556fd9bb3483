"""Finding and loading libbasp, declaring the C prototypes, and turning statuses into basp.Error."""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import struct
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _abi
from .errors import Error

ENV_VAR = "BASP_LIBRARY"
SONAMES = ("libbasp.so.0", "libbasp.so")

_lock = threading.Lock()
_lib = None
_lib_path = None

_c_void_pp = ctypes.POINTER(ctypes.c_void_p)
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_nccl_preloaded: Optional[str] = None

# name -> (restype, argtypes). Statuses come back as int (a C enum is int-sized).
_PROTOTYPES = {
    "basp_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "basp_last_error": (ctypes.c_char_p, []),
    "basp_get_version": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)] * 3),
    "basp_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "basp_comm_create_mpi": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(_abi.CommConfig), _c_void_pp]),
    "basp_comm_destroy": (ctypes.c_int, [ctypes.c_void_p]),
    "basp_comm_query": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                                       ctypes.POINTER(_abi.RankInfoStruct)]),
    "basp_comm_group_ranks": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                             ctypes.c_int32]),
    "basp_plan_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_abi.PlanDesc), _c_void_pp]),
    "basp_plan_destroy": (ctypes.c_int, [ctypes.c_void_p]),
    "basp_plan_query": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_abi.PlanInfoStruct)]),
    "basp_scatter": (ctypes.c_int, [ctypes.c_void_p, _c_void_pp, _c_void_pp, ctypes.c_void_p]),
    "basp_gather": (ctypes.c_int, [ctypes.c_void_p, _c_void_pp, _c_void_pp, ctypes.c_void_p]),
}

# Functions a libbasp may lack (older releases): declared when present; see has().
_OPTIONAL_PROTOTYPES = {
    "basp_comm_create_nccl": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_abi.CommConfig), _c_void_pp]),
    "basp_comm_get_async_error": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                                 ctypes.c_size_t]),
    "basp_comm_abort": (ctypes.c_int, [ctypes.c_void_p]),
    "basp_comm_create_oob": (ctypes.c_int, [ctypes.POINTER(_abi.OobStruct), ctypes.POINTER(_abi.CommConfig),
                                            _c_void_pp]),
}
_OPTIONAL_PROTOTYPES.update(_abi.FUNCTION_PROTOTYPES)  # 0.3: basp_split, basp_scatter_tokens, basp_gather_tokens


def _candidates() -> List[str]:
    """Where to look, in order: $BASP_LIBRARY, the copy bundled in the package (a wheel's), the CMake install's
    next to the package, then the dynamic linker's search."""
    env = os.environ.get(ENV_VAR)
    if env:
        # An explicit choice is never silently replaced by another copy.
        return [env]
    here = PACKAGE_DIR
    # Installed by CMake: <prefix>/<libdir>/basp/python/basp/ next to <prefix>/<libdir>/libbasp.so.0.
    libdir = os.path.normpath(os.path.join(here, os.pardir, os.pardir, os.pardir))
    out = [os.path.join(d, n) for d in (here, libdir) for n in SONAMES]
    out = [p for p in out if os.path.exists(p)]
    found = ctypes.util.find_library("basp")
    if found:
        out.append(found)
    out.extend(SONAMES)  # LD_LIBRARY_PATH, rpath, ld.so.cache
    return out


def wheel_nccl() -> Optional[str]:
    """The libnccl of PyTorch's nvidia-nccl wheel in this environment (site-packages/nvidia/nccl/lib), or None.
    Found without importing torch."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(candidate):
            return candidate
    return None


def _needs_nccl(candidate: str) -> bool:
    """Whether the library file names libnccl among its dependencies (its dynamic string table holds the
    soname); False when the file cannot be read (a bare soname for the dynamic linker)."""
    try:
        with open(candidate, "rb") as f:
            return b"libnccl.so" in f.read()
    except OSError:
        return False


def _preload_nccl(candidate: str) -> None:
    """Loads the nvidia-nccl wheel's libnccl first (global symbols) when the library needs NCCL, so that libbasp
    binds to the same libnccl that PyTorch uses (the dynamic linker reuses a loaded soname), whichever of the two
    is imported first. An ncclComm_t of one libnccl means nothing to another."""
    global _nccl_preloaded
    wheel = wheel_nccl()
    if wheel is None or _nccl_preloaded is not None or not _needs_nccl(candidate):
        return
    ctypes.CDLL(wheel, mode=ctypes.RTLD_GLOBAL)
    _nccl_preloaded = wheel


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libbasp once per process and returns the ctypes.CDLL. `path` (or $BASP_LIBRARY) names the file."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            if path is not None and os.path.abspath(path) != os.path.abspath(_lib_path):
                raise RuntimeError("libbasp is already loaded from %s; cannot switch to %s" % (_lib_path, path))
            return _lib
        tried = []
        for candidate in ([path] if path is not None else _candidates()):
            try:
                _preload_nccl(candidate)
                lib = ctypes.CDLL(candidate)
            except OSError as e:
                tried.append("%s (%s)" % (candidate, e))
                continue
            try:
                _declare(lib)
            except AttributeError as e:
                tried.append("%s (not libbasp, or too old: %s)" % (candidate, e))
                continue
            _lib, _lib_path = lib, candidate
            return lib
        raise OSError("libbasp could not be loaded (set $%s to the path of libbasp.so). Tried: %s"
                      % (ENV_VAR, "; ".join(tried)))


def lib() -> ctypes.CDLL:
    """The loaded library (loading it on first use)."""
    return _lib if _lib is not None else load()


def path() -> str:
    """The file libbasp was loaded from (loading it on first use)."""
    lib()
    return _lib_path


def has(name: str) -> bool:
    """Whether the loaded libbasp exports `name` (for functions newer than the oldest supported release)."""
    return getattr(lib(), name, None) is not None


def require(name: str, where: str) -> Any:
    """The C function `name`, or basp.Error(UNSUPPORTED) naming the library file when it lacks it."""
    if not has(name):
        raise Error(_abi.Status.ERROR_UNSUPPORTED, "%s: the loaded libbasp (%s) has no %s: it is older than this "
                    "binding" % (where, _lib_path, name))
    return getattr(_lib, name)


def check(status: int) -> None:
    """Raises basp.Error carrying basp_last_error() unless `status` is BASP_SUCCESS."""
    if status != _abi.Status.SUCCESS:
        message = _lib.basp_last_error()
        raise Error(status, message.decode("utf-8", "replace") if message else "")


def status_string(status: int) -> str:
    return lib().basp_status_string(int(status)).decode()


def last_error() -> str:
    return lib().basp_last_error().decode("utf-8", "replace")


def version() -> Tuple[int, int, int]:
    """(major, minor, patch) of the loaded library."""
    v = [ctypes.c_int(-1) for _ in range(3)]
    check(lib().basp_get_version(*[ctypes.byref(x) for x in v]))
    return tuple(x.value for x in v)


def features() -> Dict[str, bool]:
    """What the loaded library was built with: {"mpi", "cuda", "nccl", "hwloc"} -> bool (basp_get_features)."""
    value = ctypes.c_uint(0)
    check(require("basp_get_features", "basp.features")(ctypes.byref(value)))
    return {name: bool(value.value & bit) for name, bit in _abi.FEATURES.items()}


def nccl_library() -> Tuple[int, str]:
    """(ncclGetVersion's code, the libnccl file) the loaded library runs with; basp.Error(UNSUPPORTED) in a build
    without NCCL."""
    version = ctypes.c_int(0)
    buf = ctypes.create_string_buffer(4096)
    check(require("basp_get_nccl_library", "basp.nccl_library")(ctypes.byref(version), buf, len(buf)))
    return version.value, buf.value.decode("utf-8", "replace")


def mapped_files(prefix: str = "") -> List[str]:
    """The distinct files mapped into this process whose name starts with `prefix` ("libnccl.so"), as real paths,
    in the order /proc/self/maps lists them ([] where there is no such file)."""
    seen: List[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and \
                        os.path.basename(parts[5].strip()).startswith(prefix):
                    real = os.path.realpath(parts[5].strip())
                    if real not in seen:
                        seen.append(real)
    except OSError:
        pass
    return seen


def mapped_nccl_files() -> List[str]:
    """The distinct libnccl files mapped into this process (from /proc/self/maps; [] where there is none)."""
    return mapped_files("libnccl.so")


def elf_needed(path: str) -> Optional[List[str]]:
    """The DT_NEEDED entries (sonames) of the ELF shared object at `path`, in order, read from its section headers
    (the dynamic section and its string table, not the whole file); None when the file cannot be read or is no ELF
    file with a dynamic section."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
                return None
            end = "<" if ident[5] == 1 else ">"
            if ident[4] == 2:  # ELFCLASS64
                shoff, = struct.unpack_from(end + "Q", ident, 0x28)
                shentsize, shnum = struct.unpack_from(end + "HH", ident, 0x3A)
                section, dyn = end + "IIQQQQIIQQ", end + "qQ"
            else:  # ELFCLASS32
                shoff, = struct.unpack_from(end + "I", ident, 0x20)
                shentsize, shnum = struct.unpack_from(end + "HH", ident, 0x2E)
                section, dyn = end + "IIIIIIIIII", end + "iI"
            if shoff == 0 or shnum == 0 or shentsize < struct.calcsize(section):
                return None
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            # (type, offset, size, link) of each section
            sections = [struct.unpack_from(section, table, i * shentsize) for i in range(shnum)]
            sections = [(s[1], s[4], s[5], s[6]) for s in sections]
            dynamic = [s for s in sections if s[0] == 6]  # SHT_DYNAMIC
            if not dynamic:
                return None
            _, offset, size, link = dynamic[0]
            _, str_offset, str_size, _ = sections[link]
            f.seek(str_offset)
            strings = f.read(str_size)
            f.seek(offset)
            entries = f.read(size)
    except (OSError, struct.error, IndexError):
        return None
    needed: List[str] = []
    step = struct.calcsize(dyn)
    for at in range(0, len(entries) - step + 1, step):
        tag, value = struct.unpack_from(dyn, entries, at)
        if tag == 0:  # DT_NULL
            break
        if tag == 1 and value < len(strings):  # DT_NEEDED
            needed.append(strings[value:strings.find(b"\0", value)].decode("utf-8", "replace"))
    return needed


def split(items: int, parts: int, index: int, where: str) -> Tuple[int, int]:
    """basp_split: [begin, end) of position `index` when `items` are split over `parts` positions as
    torch.tensor_split does (the first items % parts positions get one more)."""
    begin, end = ctypes.c_int64(0), ctypes.c_int64(0)
    check(require("basp_split", where)(int(items), int(parts), int(index), ctypes.byref(begin), ctypes.byref(end)))
    return begin.value, end.value


def pointer_array(pointers: Sequence[Optional[int]]) -> ctypes.Array:
    """A C array of void* from Python ints (data pointers)."""
    arr = (ctypes.c_void_p * max(1, len(pointers)))()
    for i, p in enumerate(pointers):
        arr[i] = p
    return arr
