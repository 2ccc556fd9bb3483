"""The ctypes mirror of basp.h matches the header byte for byte: struct sizes, field offsets and sizes, the
bytes of each ..._INITIALIZER, enum values, constants, status strings and the library version.

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


def test_constants():
    k = C["constants"]
    check.equal(_abi.MAX_TENSORS, k["BASP_MAX_TENSORS"], "BASP_MAX_TENSORS")
    for name in ("COMM_CONFIG", "RANK_INFO", "PLAN_DESC", "PLAN_INFO"):
        for what in ("MAGIC", "VERSION"):
            check.equal(getattr(_abi, "%s_%s" % (name, what)), k["BASP_%s_%s" % (name, what)], name + what)
    check.equal(ctypes.sizeof(ctypes.c_int), k["sizeof(basp_mpi_fint_t)"], "basp_mpi_fint_t is a C int")
    check.equal(ctypes.sizeof(ctypes.c_int), k["sizeof(basp_status_t)"], "basp_status_t is int-sized")


def test_enums():
    k = C["constants"]
    for enum_type, prefix in ((_abi.Status, "BASP_"), (_abi.Backend, "BASP_BACKEND_"),
                              (_abi.Placement, "BASP_PLACEMENT_"), (_abi.Path, "BASP_PATH_"),
                              (_abi.Layout, "BASP_LAYOUT_"),
                              (_abi.Dtype, "BASP_DTYPE_")):
        c_names = {n for n in k if n.startswith(prefix) and not n.endswith("_COUNT")}
        if enum_type is _abi.Status:
            c_names = {n for n in c_names if n == "BASP_SUCCESS" or n.startswith("BASP_ERROR_")}
        check.equal({prefix + m.name for m in enum_type}, c_names, "members of %s" % enum_type.__name__)
        for m in enum_type:
            check.equal(int(m), k[prefix + m.name], prefix + m.name)
    check.equal(_abi.STATUS_COUNT, k["BASP_STATUS_COUNT"], "BASP_STATUS_COUNT")
    check.equal(_abi.BACKEND_COUNT, k["BASP_BACKEND_COUNT"], "BASP_BACKEND_COUNT")
    check.equal(_abi.PLACEMENT_COUNT, k["BASP_PLACEMENT_COUNT"], "BASP_PLACEMENT_COUNT")
    check.equal(_abi.PATH_COUNT, k["BASP_PATH_COUNT"], "BASP_PATH_COUNT")
    check.equal(_abi.LAYOUT_COUNT, k["BASP_LAYOUT_COUNT"], "BASP_LAYOUT_COUNT")
    check.equal(_abi.DTYPE_COUNT, k["BASP_DTYPE_COUNT"], "BASP_DTYPE_COUNT")


def test_library_agrees():
    k = C["constants"]
    check.equal(basp.version(), (k["BASP_VERSION_MAJOR"], k["BASP_VERSION_MINOR"], k["BASP_VERSION_PATCH"]),
                "library version vs header")
    lib = basp._library.lib()
    for d in _abi.Dtype:
        check.equal(lib.basp_dtype_size(int(d)), _abi.DTYPE_SIZE[d], "basp_dtype_size(%s)" % d.name)
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


if __name__ == "__main__":
    run(globals())
