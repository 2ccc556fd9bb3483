"""What the binding needs to know about a NumPy array or a PyTorch tensor before handing its pointer to C.

Neither NumPy nor PyTorch is imported unless the caller already did: an object is recognised by its type's
module, so `import basp` stays light and works with either library absent.
"""
from __future__ import annotations

import sys
from typing import Any, Tuple

from ._abi import Dtype
from .errors import invalid_argument

# For type hints only: neither library is imported here, so these cannot name their classes.
Array = Any  # a numpy.ndarray or a torch.Tensor
DtypeLike = Any  # a basp.Dtype or its int, a NumPy dtype (or what numpy.dtype() accepts) or a torch.dtype


def _numpy_dtypes():
    np = sys.modules.get("numpy")
    if np is None:
        return {}
    # NumPy has no bfloat16 or fp8: their bits travel as uint16 / uint8.
    return {
        Dtype.BYTE: (np.uint8, np.int8), Dtype.FP8_E4M3: (np.uint8,), Dtype.FP8_E5M2: (np.uint8,),
        Dtype.FP16: (np.float16,), Dtype.BF16: (np.uint16,), Dtype.FP32: (np.float32,),
        Dtype.FP64: (np.float64,), Dtype.INT32: (np.int32,), Dtype.INT64: (np.int64,),
    }


def _torch_dtypes():
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    e4m3 = tuple(getattr(torch, n) for n in ("float8_e4m3fn",) if hasattr(torch, n))
    e5m2 = tuple(getattr(torch, n) for n in ("float8_e5m2",) if hasattr(torch, n))
    return {
        Dtype.BYTE: (torch.uint8, torch.int8), Dtype.FP8_E4M3: e4m3 + (torch.uint8,),
        Dtype.FP8_E5M2: e5m2 + (torch.uint8,), Dtype.FP16: (torch.float16,), Dtype.BF16: (torch.bfloat16,),
        Dtype.FP32: (torch.float32,), Dtype.FP64: (torch.float64,), Dtype.INT32: (torch.int32,),
        Dtype.INT64: (torch.int64,),
    }


def is_numpy(obj: Any) -> bool:
    return type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray"


def is_torch(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def basp_dtype(dtype: DtypeLike, name: str) -> int:
    """A basp.Dtype (or its int), a NumPy dtype or a PyTorch dtype -> basp.Dtype value (int).

    uint8 and int8 map to BYTE; NumPy's uint16 (bfloat16 bits) and uint8 (fp8 bits) need basp.Dtype.BF16 and
    basp.Dtype.FP8_* given explicitly. `name` prefixes the error message ("basp.Plan: dtype").
    """
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return int(dtype)  # out-of-range values are for the library to name
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        natural = {torch.float16: Dtype.FP16, torch.bfloat16: Dtype.BF16, torch.float32: Dtype.FP32,
                   torch.float64: Dtype.FP64, torch.int32: Dtype.INT32, torch.int64: Dtype.INT64,
                   torch.uint8: Dtype.BYTE, torch.int8: Dtype.BYTE}
        for attr, d in (("float8_e4m3fn", Dtype.FP8_E4M3), ("float8_e5m2", Dtype.FP8_E5M2)):
            if hasattr(torch, attr):
                natural[getattr(torch, attr)] = d
        if dtype in natural:
            return int(natural[dtype])
        raise invalid_argument("%s (%s) has no basp.Dtype" % (name, dtype))
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            d = np.dtype(dtype)
        except TypeError:
            d = None
        if d is not None:
            natural = {np.dtype(np.float16): Dtype.FP16, np.dtype(np.float32): Dtype.FP32,
                       np.dtype(np.float64): Dtype.FP64, np.dtype(np.int32): Dtype.INT32,
                       np.dtype(np.int64): Dtype.INT64, np.dtype(np.uint8): Dtype.BYTE,
                       np.dtype(np.int8): Dtype.BYTE}
            if d in natural:
                return int(natural[d])
            raise invalid_argument("%s (%s) has no basp.Dtype" % (name, d))
    raise invalid_argument("%s (%r) is not a basp.Dtype, a NumPy dtype or a PyTorch dtype" % (name, dtype))


class ArrayInfo:
    """kind ("numpy" | "torch"), shape, dtype (the library's own object), pointer, contiguous, writeable,
    device ("cpu", "cuda:0", ...), empty (no element: its pointer goes to the library as NULL)."""

    def __init__(self, obj: Array, name: str) -> None:
        self.obj = obj
        self.name = name
        if is_numpy(obj):
            self.kind = "numpy"
            self.shape = tuple(obj.shape)
            self.dtype = obj.dtype
            self.pointer = obj.__array_interface__["data"][0]
            self.contiguous = bool(obj.flags["C_CONTIGUOUS"])
            self.writeable = bool(obj.flags["WRITEABLE"])
            self.device = "cpu"
        elif is_torch(obj):
            self.kind = "torch"
            self.shape = tuple(obj.shape)
            self.dtype = obj.dtype
            self.pointer = obj.data_ptr()
            self.contiguous = obj.is_contiguous()
            self.writeable = True
            self.device = str(obj.device)
        else:
            raise invalid_argument("%s (a %s.%s) is neither a numpy.ndarray nor a torch.Tensor" % (
                name, type(obj).__module__, type(obj).__name__))
        self.empty = any(d == 0 for d in self.shape)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def accepts(self, dtype: Dtype) -> bool:
        table = _numpy_dtypes() if self.kind == "numpy" else _torch_dtypes()
        return any(self.dtype == t for t in table.get(dtype, ()))

    def accepted_names(self, dtype: Dtype) -> str:
        table = _numpy_dtypes() if self.kind == "numpy" else _torch_dtypes()
        return ", ".join(str(t if self.kind == "torch" else t.__name__) for t in table.get(dtype, ())) or "none"


def empty_like_kind(template: ArrayInfo, shape: Tuple[int, ...]) -> Array:
    """An uninitialised array of `shape` with the kind, dtype and device of `template` (an ArrayInfo)."""
    if template.kind == "numpy":
        return sys.modules["numpy"].empty(shape, dtype=template.dtype)
    return sys.modules["torch"].empty(shape, dtype=template.dtype, device=template.obj.device)
