"""basp.Plan.choose_head_chunks: basp_choose_head_chunks (basp.h, "Head chunks") for a layer of a scatter plan,
attention and a gather plan. The ctypes mirror of basp_head_chunk_choice_v1 and the function's prototype live here,
in a block of their own as the documents' do in _abi.py; python/tests/test_head_chunks.py checks them against the
header with its own probe (abi_head_chunks.c).
"""
from __future__ import annotations

import ctypes
from typing import Any, List, NamedTuple, Optional

from . import _abi, _library
from .errors import int64_arg, invalid_argument

HEAD_CHUNK_CHOICE_MAGIC = 0x42484343  # "BHCC"
HEAD_CHUNK_CHOICE_VERSION = 1


class HeadChunkChoiceStruct(_abi._Versioned):
    """basp_head_chunk_choice_v1."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("num_chunks", ctypes.c_int32),
        ("max_head_chunks", ctypes.c_int32),
        ("attention_seconds", ctypes.c_double),
        ("seconds_one", ctypes.c_double),
        ("seconds_chosen", ctypes.c_double),
    ]
    _magic = HEAD_CHUNK_CHOICE_MAGIC
    _version = HEAD_CHUNK_CHOICE_VERSION


# The structs of this block (struct name in basp.h -> its mirror), for test_head_chunks.py.
HEAD_CHUNK_STRUCTS = {"basp_head_chunk_choice_v1": HeadChunkChoiceStruct}

# basp_status_t basp_choose_head_chunks(basp_plan_t scatter, basp_plan_t gather, int64_t num_tokens,
#     double attention_seconds, int32_t collective, basp_head_chunk_choice_t* choice, double* predicted_seconds,
#     int32_t capacity): (restype, argtypes), declared when first called.
CHOOSE_HEAD_CHUNKS_PROTOTYPE = (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double,
                                               ctypes.c_int32, ctypes.POINTER(HeadChunkChoiceStruct),
                                               ctypes.POINTER(ctypes.c_double), ctypes.c_int32])


class HeadChunkChoice(NamedTuple):
    """The chosen head chunk count C (1..max_head_chunks), the most the plans take, the attention seconds the choice
    used (collective: the maximum over the ranks) and predicted[c - 1], the predicted layer seconds T(c) for
    c = 1..max_head_chunks."""
    num_chunks: int
    max_head_chunks: int
    attention_seconds: float
    predicted: List[float]


def _function() -> Any:
    fn = _library.require("basp_choose_head_chunks", "basp.Plan.choose_head_chunks")
    if fn.argtypes is None:
        fn.restype, fn.argtypes = CHOOSE_HEAD_CHUNKS_PROTOTYPE
    return fn


def choose_head_chunks(scatter: Any, attention_seconds: float, gather: Optional[Any], num_tokens: Optional[int],
                       collective: bool) -> HeadChunkChoice:
    """basp.Plan.choose_head_chunks on plan `scatter` (see there)."""
    where = "basp.Plan.choose_head_chunks"
    if gather is not None and not isinstance(gather, type(scatter)):
        raise invalid_argument("%s: gather (a %s) is not a basp.Plan" % (where, type(gather).__name__))
    try:
        seconds = float(attention_seconds)
    except (TypeError, ValueError):
        raise invalid_argument("%s: attention_seconds (%r) is not a number" % (where, attention_seconds)) from None
    tokens = -1 if num_tokens is None else int64_arg(num_tokens, "num_tokens", where)
    fn = _function()
    choice = HeadChunkChoiceStruct()
    # The maximum is the same on every rank of the group: a collective call asked again is asked on all of them.
    capacity = 256
    while True:
        predicted = (ctypes.c_double * capacity)()
        _library.check(fn(scatter.handle, gather.handle if gather is not None else None, tokens, seconds,
                          1 if collective else 0, ctypes.byref(choice), predicted, capacity))
        if choice.max_head_chunks <= capacity:
            break
        capacity = choice.max_head_chunks
    return HeadChunkChoice(choice.num_chunks, choice.max_head_chunks, choice.attention_seconds,
                           list(predicted[:choice.max_head_chunks]))
