"""The ctypes mirror of basp.h matches the header byte for byte: struct sizes, field offsets and sizes, the
bytes of each ..._INITIALIZER, callback prototypes, enum values (aliases included), constants, status strings and
the library version. Every constant the C program prints must be checked here (the last test says which were not).

usage: python3 test_abi.py <path of the abi_layout program built from basp.h>
"""
import ctypes
import json
import subprocess
import sys

import basp
from basp import _abi
from harness import check, run

C = json.loads(subprocess.run([sys.argv[1]], check=True, stdout=subprocess.PIPE).stdout)
sys.argv = sys.argv[:1]


class Constants(dict):
    """The header's constants, remembering which ones a test looked at."""

    def __init__(self, values):
        super().__init__(values)
        self.used = set()

    def __getitem__(self, name):
        self.used.add(name)
        return super().__getitem__(name)


K = Constants(C["constants"])


def test_struct_layout():
    check.equal(set(C["structs"]), set(_abi.STRUCTS), "structs mirrored")
    for cname, mirror in _abi.STRUCTS.items():
        c = C["structs"][cname]
        check.equal(ctypes.sizeof(mirror), c["sizeof"], "sizeof(%s)" % cname)
        py_fields = [name for name, _ in mirror._fields_]
        check.equal(py_fields, [f["name"] for f in c["fields"]], "fields of %s in order" % cname)
        for f in c["fields"]:
            desc = getattr(mirror, f["name"])
            check.equal((desc.offset, desc.size), (f["offset"], f["size"]), "%s.%s offset, size" % (cname, f["name"]))


def test_initializers_byte_for_byte():
    for cname, mirror in _abi.STRUCTS.items():
        got = bytes(mirror()).hex()
        check.equal(got, C["structs"][cname]["initializer"], "%s() vs its _INITIALIZER" % cname)


# ctypes type -> its C spelling in a prototype (ctypes has no const: "const void*" is c_void_p too).
C_SPELLING = {ctypes.c_int: "int", ctypes.c_void_p: "void*", ctypes.c_size_t: "size_t",
              ctypes.POINTER(ctypes.c_void_p): "void**"}


def spell(cfunctype):
    """'int (void*, void*)' for a CFUNCTYPE, in the C program's spelling; '?' for a type not in C_SPELLING."""
    args = ", ".join(C_SPELLING.get(t, "?") for t in cfunctype._argtypes_)
    return "%s (%s)" % (C_SPELLING.get(cfunctype._restype_, "?"), args)


def test_callback_prototypes():
    callbacks = {"%s.%s" % (cname, name): ftype for cname, mirror in _abi.STRUCTS.items()
                 for name, ftype in mirror._fields_ if hasattr(ftype, "_argtypes_")}
    check.equal(set(callbacks), set(C["prototypes"]), "callback fields with a prototype")
    for name, ftype in callbacks.items():
        check.equal(spell(ftype), C["prototypes"][name].replace("const ", ""), "prototype of %s" % name)


# C spellings in the functions' prototypes -> what ctypes can tell apart (basp_status_t is int-sized: test_constants).
C_CANONICAL = {"int": "int32", "int32_t": "int32", "int64_t": "int64", "basp_status_t": "int32", "void*": "void*",
               "basp_plan_t": "void*", "int64_t*": "ptr(int64)", "const int64_t*": "ptr(int64)",
               "const void* const*": "ptr(void*)", "void* const*": "ptr(void*)", "unsigned*": "ptr(int32)",
               "int*": "ptr(int32)", "char*": "char*", "const char*": "char*", "size_t": "int64",
               # 0.5: the batch plans' functions
               "basp_comm_t": "void*", "basp_plan_t*": "ptr(void*)", "int32_t*": "ptr(int32)",
               "double*": "ptr(double)", "size_t*": "ptr(int64)",
               "const basp_plan_desc_t*": "ptr(basp_plan_desc_v1)", "const basp_batch_t*": "ptr(basp_batch_v1)",
               "basp_batch_t*": "ptr(basp_batch_v1)", "const basp_batch_problem_t*": "ptr(basp_batch_problem_v1)",
               "basp_cost_model_t*": "ptr(basp_cost_model_v1)",
               "const basp_cost_model_t*": "ptr(basp_cost_model_v1)"}

STRUCT_NAMES = {mirror: cname for cname, mirror in _abi.STRUCTS.items()}


def canonical(ctype):
    """A ctypes type as C_CANONICAL spells it (ctypes.c_int32 is c_int on Linux, so sizes, not names)."""
    if ctype is ctypes.c_void_p:
        return "void*"
    if ctype is ctypes.c_char_p:
        return "char*"
    if ctype in STRUCT_NAMES:  # a mirrored struct, by its name in basp.h (its layout: test_struct_layout)
        return STRUCT_NAMES[ctype]
    if ctype in (ctypes.c_double, ctypes.c_float):
        return "double" if ctype is ctypes.c_double else "float"
    if hasattr(ctype, "contents"):  # a POINTER(...) type
        return "ptr(%s)" % canonical(ctype._type_)
    return "int%d" % (8 * ctypes.sizeof(ctype))


def test_function_prototypes():
    check.equal(set(_abi.FUNCTION_PROTOTYPES), set(C["functions"]), "functions with a declared prototype")
    for name, (restype, argtypes) in _abi.FUNCTION_PROTOTYPES.items():
        ret, args = C["functions"][name].split(" ", 1)
        c_args = [C_CANONICAL.get(a.strip(), "?" + a) for a in args.strip("()").split(",")]
        check.equal([canonical(restype)] + [canonical(t) for t in argtypes], [C_CANONICAL.get(ret, "?")] + c_args,
                    "prototype of %s" % name)
        fn = getattr(basp._library.lib(), name)
        check.equal((fn.restype, fn.argtypes), (restype, argtypes), "%s declared on the loaded library" % name)
    begin, end = ctypes.c_int64(-1), ctypes.c_int64(-1)
    results = []
    for j in range(4):
        check.equal(basp._library.lib().basp_split(10, 4, j, ctypes.byref(begin), ctypes.byref(end)), 0, "split")
        results.append((begin.value, end.value))
    check.equal(results, [(0, 3), (3, 6), (6, 8), (8, 10)], "basp_split(10, 4, j) is tensor_split's")


def test_callbacks_default_null_and_can_be_called():
    oob = basp.OobStruct()
    check.true(not any((oob.allgather_start, oob.allgather_test, oob.allgather_free)), "callbacks start NULL")
    seen = []

    def start(user_data, send, recv, nbytes, request):
        ctypes.memmove(recv, send, nbytes)
        request[0] = 42
        return _abi.OOB_SUCCESS

    def test(user_data, request):
        seen.append(request)
        return _abi.OOB_IN_PROGRESS

    oob.allgather_start = _abi.OobAllgatherStart(start)
    oob.allgather_test = _abi.OobAllgatherTest(test)
    send, recv, request = ctypes.create_string_buffer(b"basp", 4), ctypes.create_string_buffer(4), ctypes.c_void_p()
    check.equal(oob.allgather_start(None, send, recv, 4, ctypes.byref(request)), _abi.OOB_SUCCESS, "start returns")
    check.equal((recv.raw, request.value), (b"basp", 42), "start wrote recv and *request")
    check.equal(oob.allgather_test(None, request), _abi.OOB_IN_PROGRESS, "test returns")
    check.equal(seen, [42], "test got the request")


def test_constants():
    check.equal(_abi.MAX_TENSORS, K["BASP_MAX_TENSORS"], "BASP_MAX_TENSORS")
    check.equal(_abi.MAX_DIMS, K["BASP_MAX_DIMS"], "BASP_MAX_DIMS")
    for name in ("COMM_CONFIG", "RANK_INFO", "PLAN_DESC", "PLAN_INFO", "OOB", "BATCH", "BATCH_PROBLEM", "COST_MODEL"):
        for what in ("MAGIC", "VERSION"):
            check.equal(getattr(_abi, "%s_%s" % (name, what)), K["BASP_%s_%s" % (name, what)], name + what)
    check.equal(_abi.OOB_SUCCESS, K["BASP_OOB_SUCCESS"], "BASP_OOB_SUCCESS")
    check.equal(_abi.OOB_IN_PROGRESS, K["BASP_OOB_IN_PROGRESS"], "BASP_OOB_IN_PROGRESS")
    check.equal(ctypes.sizeof(ctypes.c_int), K["sizeof(basp_mpi_fint_t)"], "basp_mpi_fint_t is a C int")
    check.equal(ctypes.sizeof(ctypes.c_int), K["sizeof(basp_status_t)"], "basp_status_t is int-sized")
    check.equal(_abi.DTYPE_UNSET, K["BASP_DTYPE_UNSET"], "BASP_DTYPE_UNSET")
    check.equal(basp.PlanDesc().dtype, K["BASP_DTYPE_UNSET"], "PlanDesc() leaves dtype unset")


# Header names that are not enum members on the Python side: Dtype lists element types only.
NOT_MEMBERS = {"BASP_DTYPE_UNSET"}


def test_enums():
    for enum_type, prefix in ((_abi.Status, "BASP_"), (_abi.Backend, "BASP_BACKEND_"),
                              (_abi.Placement, "BASP_PLACEMENT_"), (_abi.Path, "BASP_PATH_"),
                              (_abi.Layout, "BASP_LAYOUT_"),
                              (_abi.Dtype, "BASP_DTYPE_")):
        c_names = {n for n in K if n.startswith(prefix) and not n.endswith("_COUNT") and n not in NOT_MEMBERS}
        if enum_type is _abi.Status:
            c_names = {n for n in c_names if n == "BASP_SUCCESS" or n.startswith("BASP_ERROR_")}
        # __members__ includes aliases (Path.DIRECT of Path.CMA), which iterating the enum skips.
        members = enum_type.__members__
        check.equal({prefix + name for name in members}, c_names, "members of %s" % enum_type.__name__)
        for name, m in members.items():
            check.equal(int(m), K[prefix + name], prefix + name)
    check.true(_abi.Path.DIRECT is _abi.Path.CMA, "Path.DIRECT is an alias of Path.CMA")
    check.equal(_abi.STATUS_COUNT, K["BASP_STATUS_COUNT"], "BASP_STATUS_COUNT")
    check.equal(_abi.BACKEND_COUNT, K["BASP_BACKEND_COUNT"], "BASP_BACKEND_COUNT")
    check.equal(_abi.PLACEMENT_COUNT, K["BASP_PLACEMENT_COUNT"], "BASP_PLACEMENT_COUNT")
    check.equal(_abi.PATH_COUNT, K["BASP_PATH_COUNT"], "BASP_PATH_COUNT")
    check.equal(_abi.LAYOUT_COUNT, K["BASP_LAYOUT_COUNT"], "BASP_LAYOUT_COUNT")
    check.equal(_abi.DTYPE_COUNT, K["BASP_DTYPE_COUNT"], "BASP_DTYPE_COUNT")


def test_features():
    for name, bit in _abi.FEATURES.items():
        check.equal(bit, K["BASP_FEATURE_" + name.upper()], "BASP_FEATURE_%s" % name.upper())
    features = basp.features()
    check.equal(sorted(features), sorted(_abi.FEATURES), "basp.features() names every bit")
    check.true(features["mpi"], "this test runs under a build with MPI")


def test_library_agrees():
    check.equal(basp.version(), (K["BASP_VERSION_MAJOR"], K["BASP_VERSION_MINOR"], K["BASP_VERSION_PATCH"]),
                "library version vs header")
    lib = basp._library.lib()
    for d in _abi.Dtype:
        check.equal(lib.basp_dtype_size(int(d)), _abi.DTYPE_SIZE[d], "basp_dtype_size(%s)" % d.name)
    for value, name in ((_abi.DTYPE_UNSET, "DTYPE_UNSET"), (_abi.DTYPE_COUNT, "DTYPE_COUNT")):
        check.equal(lib.basp_dtype_size(value), 0, "basp_dtype_size(%s) is 0" % name)
    for s in _abi.Status:
        check.equal(basp.status_string(s), "BASP_" + s.name, "basp_status_string(%d)" % s)
        check.equal(basp.Error(s, "x").status_name, "BASP_" + s.name, "Error.status_name")
    check.equal(basp.status_string(_abi.STATUS_COUNT), "unknown status", "status string past the end")


def test_struct_construction():
    cfg = basp.CommConfig(micro_batch=4, num_groups=2)
    check.equal((cfg.micro_batch, cfg.num_groups, cfg.backend), (4, 2, 0), "CommConfig keyword fields")
    try:
        basp.CommConfig(micro_batchh=4)
    except TypeError as e:
        check.true("micro_batchh" in str(e), "unknown field named: %s" % e)
    else:
        raise AssertionError("CommConfig accepted an unknown field")
    info = basp.PlanInfoStruct()
    info.seq_sharded_shape[1][2] = 7
    rows = info.as_dict()["seq_sharded_shape"]
    check.equal((len(rows), rows[1], rows[0]), (_abi.MAX_TENSORS, [0, 0, 7, 0], [0] * _abi.MAX_DIMS),
                "as_dict turns nested arrays into lists")


def test_every_constant_checked():
    # Last: a constant added to abi_layout.c but never compared with the mirror fails here.
    check.equal(sorted(set(K) - K.used), [], "constants of the header that no test checked")


if __name__ == "__main__":
    run(globals())
