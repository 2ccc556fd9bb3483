"""The package's structure, without MPI or a library call: no module imports one that imports it back (even
inside a function), the handle base class (close once, context manager, a destructor that never raises, repr,
plans before comms at exit), PlanInfo read from a hand-filled struct and the checks Plan makes on it, type hints on
every public function that resolve, and Python 3.9 syntax.

usage: python3 test_package.py
"""
import ast
import importlib
import inspect
import os
import sys
import types
import typing

import basp
from basp import _handle, _library
from harness import check, run

PACKAGE_DIR = os.path.dirname(os.path.abspath(basp.__file__))
MODULES = sorted(f[:-3] for f in os.listdir(PACKAGE_DIR) if f.endswith(".py"))


def _source(module):
    with open(os.path.join(PACKAGE_DIR, module + ".py")) as f:
        return f.read()


def _imports(module):
    """The package's modules that `module` imports anywhere in its body, functions included."""
    out = set()
    for node in ast.walk(ast.parse(_source(module))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            out.update(n.split(".")[0] for n in names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "basp":
            out.add((node.module.split(".") + ["__init__"])[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("basp."))
    return out & set(MODULES)


def _cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_cycles():
    graph = {m: _imports(m) - {"__init__"} for m in MODULES if m != "__init__"}
    check.true("plan" in graph["comm"], "the graph sees comm importing plan: %r" % graph["comm"])
    check.equal(_cycle(graph), None, "an import cycle among the package's modules")


def test_python39_syntax():
    for m in MODULES:
        tree = ast.parse(_source(m), feature_version=(3, 9))
        # `X | Y` in an annotation only works from 3.10 once typing.get_type_hints evaluates it.
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ann = node.returns
            elif isinstance(node, (ast.arg, ast.AnnAssign)):
                ann = node.annotation
            else:
                continue
            for a in filter(None, [ann]):
                check.true(not any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) for n in ast.walk(a)),
                           "%s.py line %d: an annotation with `|` (use typing.Union/Optional)" % (m, a.lineno))


def _public_functions(module):
    """(name, function) of the module's public functions and of the public methods of its public classes."""
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(fn):
                    yield "%s.%s" % (name, attr), fn


def _hinted_modules():
    mods = [basp.batch, basp.comm, basp.plan, basp.data, basp.errors, basp.oob, basp._handle]
    try:
        mods.append(importlib.import_module("basp.torch"))
    except ImportError:  # no PyTorch: basp.torch cannot be imported at all
        print("basp.torch not checked: PyTorch is not importable", flush=True)
    return mods


def test_public_api_has_type_hints():
    for module in _hinted_modules():
        for name, fn in _public_functions(module):
            what = "%s.%s" % (module.__name__, name)
            hints = typing.get_type_hints(fn)  # raises when an annotation names something unknown
            params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls", "ctx")]
            missing = [p.name for p in params if p.name not in hints]
            check.equal(missing, [], "%s: parameters without a type hint" % what)
            check.true("return" in hints, "%s has no return type hint" % what)


class FakeLib:
    """Stands in for libbasp: records what is destroyed, fails on request."""

    def __init__(self):
        self.destroyed = []
        self.status = 0

    def basp_last_error(self):
        return b"fake_destroy: failed"

    def fake_plan_destroy(self, handle):
        self.destroyed.append(("plan", handle))
        return self.status

    def fake_comm_destroy(self, handle):
        self.destroyed.append(("comm", handle))
        return self.status


class FakePlan(_handle.Handle):
    _destroy_name = "fake_plan_destroy"
    _close_order = 0

    def _describe(self):
        return "P%d" % self.number


class FakeComm(_handle.CommHandle):
    _destroy_name = "fake_comm_destroy"

    def _describe(self):
        return "C%d" % self.number


def _fake(cls, number):
    obj = cls()
    obj.number = number
    obj._adopt_handle(1000 + number)
    return obj


def with_fake_library(fn):
    saved = _library._lib
    _library._lib = FakeLib()
    try:
        fn(_library._lib)
    finally:
        _library._lib = saved


def test_handle_close_and_context():
    def body(lib):
        comm = _fake(FakeComm, 1)
        check.equal((comm.handle, comm.closed, repr(comm)), (1001, False, "basp.FakeComm(C1)"), "an open handle")
        with comm as same:
            check.true(same is comm, "__enter__ returns the object")
        check.equal((comm.handle, comm.closed, repr(comm)), (None, True, "basp.FakeComm(C1, closed)"), "closed")
        comm.close()
        check.equal(lib.destroyed, [("comm", 1001)], "destroyed once, by __exit__")
        half = FakePlan()  # as after an __init__ that failed before the library made the handle
        half.close()
        check.equal(repr(half), "basp.FakePlan(not created, closed)", "repr of a half-made object")
        check.equal(lib.destroyed, [("comm", 1001)], "nothing destroyed for it")

    with_fake_library(body)


def test_handle_errors():
    def body(lib):
        plan = _fake(FakePlan, 2)
        lib.status = int(basp.Status.ERROR_INVALID_HANDLE)
        try:
            plan.close()
        except basp.Error as e:
            check.equal((e.status, e.message), (basp.Status.ERROR_INVALID_HANDLE, "fake_destroy: failed"), "error")
        else:
            raise AssertionError("a failed destroy raised nothing")
        check.true(plan.closed, "closed even though destroy failed: it is never retried")
        doomed = _fake(FakePlan, 3)
        doomed.__del__()  # a failing destroy inside a destructor is swallowed
        check.equal(lib.destroyed, [("plan", 1002), ("plan", 1003)], "both destroyed once")

    with_fake_library(body)


def test_plans_close_before_comms_at_exit():
    def body(lib):
        objs = [_fake(FakeComm, 1), _fake(FakePlan, 2), _fake(FakeComm, 3), _fake(FakePlan, 4)]
        closed_early = _fake(FakePlan, 5)
        closed_early.close()
        lib.destroyed.clear()
        _handle._close_all()
        kinds = [kind for kind, _ in lib.destroyed]
        check.equal(kinds, ["plan", "plan", "comm", "comm"], "exit order")
        check.equal(sorted(h for _, h in lib.destroyed), [1001, 1002, 1003, 1004], "each live handle once")
        check.true(all(o.closed for o in objs), "all closed")

    with_fake_library(body)


def test_plan_checks_its_comm_against_the_base():
    check.true(issubclass(basp.Comm, _handle.CommHandle) and issubclass(basp.Plan, _handle.Handle), "bases")
    fake_comm = types.SimpleNamespace(handle=None, backend=basp.Backend.MPI)
    try:
        basp.Plan(fake_comm, 4, 4, [1], basp.Dtype.FP32)
    except basp.Error as e:
        check.equal(e.message, "basp.Plan: comm (a SimpleNamespace) is not a basp.Comm", "message")
    else:
        raise AssertionError("basp.Plan accepted a comm that is not a basp.Comm")


def _plan_info_struct(ndim=4):
    """What a library would report for a BSHD plan of two tensors (8 and 4 heads), K = 4, b_loc 2, S 16, D 3,
    on the rank at position 1 of its group."""
    info = basp.PlanInfoStruct(num_tensors=2, group_size=4, local_sequences=2, local_tokens=4, layout=0, ndim=ndim,
                               last_path=99, plan_path=int(basp.Path.CMA))
    for t, h in enumerate((8, 4)):
        seq, head = (2, 4, h, 3), (2, 16, h // 4, 3)
        for d in range(4):
            info.seq_sharded_shape[t][d], info.head_sharded_shape[t][d] = seq[d], head[d]
        info.seq_sharded_elems[t], info.head_sharded_elems[t] = 2 * 4 * h * 3, 2 * 16 * (h // 4) * 3
        info.head_begin[t], info.head_end[t] = h // 4, 2 * (h // 4)
    return info


def test_plan_info_from_the_struct():
    info = basp.PlanInfo(_plan_info_struct())
    check.equal((info.layout, info.ndim, info.plan_path, info.last_path), (basp.Layout.BSHD, 4, basp.Path.CMA, 99),
                "layout, ndim, paths (an unknown path stays an int)")
    check.equal(info.seq_sharded_shapes, [(2, 4, 8, 3), (2, 4, 4, 3)], "sequence-sharded shapes")
    check.equal(info.head_sharded_shapes, [(2, 16, 2, 3), (2, 16, 1, 3)], "head-sharded shapes")
    check.equal((info.head_begin, info.head_end, info.head_ranges), ([2, 1], [4, 2], [range(2, 4), range(1, 2)]),
                "head ranges")
    check.equal(basp.PlanInfo(_plan_info_struct(ndim=2)).seq_sharded_shapes, [(2, 4), (2, 4)], "first ndim dims")


def test_plan_info_splits_tokens_and_replication():
    struct = _plan_info_struct()
    for t, (b, e) in enumerate(((2, 4), (5, 9))):
        struct.split_begin[t], struct.split_end[t] = b, e
    struct.token_begin, struct.token_end, struct.token_capacity, struct.replicated = 4, 8, 0, 1
    info = basp.PlanInfo(struct)
    check.equal((info.split_begin, info.split_end, info.split_ranges), ([2, 5], [4, 9], [range(2, 4), range(5, 9)]),
                "split ranges")
    check.equal((info.token_begin, info.token_end, info.tokens, info.token_capacity, info.replicated),
                (4, 8, slice(4, 8), 0, True), "token range, capacity, replicated")


def test_plan_info_checks():
    from basp.plan import _check_info

    def body(lib):
        _check_info(basp.PlanInfo(_plan_info_struct()), [8, 4], [3, 3])  # consistent: no error
        cases = [(dict(ndim=0), [8, 4], basp.Status.ERROR_UNSUPPORTED, "reports no tensor shapes"),
                 (dict(ndim=5), [8, 4], basp.Status.ERROR_INTERNAL, "num_tensors 2 and ndim 5"),
                 (dict(), [8], basp.Status.ERROR_INTERNAL, "num_tensors 2 and ndim 4 for a plan of num_heads [8]"),
                 (dict(elems=97), [8, 4], basp.Status.ERROR_INTERNAL, "for tensor 1 but 97 and 96 elements"),
                 # A library older than head_dims made D 3 for both tensors where [3, 5] was asked.
                 (dict(dims=[3, 5]), [8, 4], basp.Status.ERROR_UNSUPPORTED,
                  "asked for head sizes [3, 5]")]
        for fields, heads, status, fragment in cases:
            struct = _plan_info_struct(fields.get("ndim", 4))
            struct.seq_sharded_elems[1] = fields.get("elems", struct.seq_sharded_elems[1])
            try:
                _check_info(basp.PlanInfo(struct), heads, fields.get("dims", [3] * len(heads)))
            except basp.Error as e:
                check.equal(e.status, status, "status for %r" % fields)
                check.true(fragment in e.message, "%r lacks %r" % (e.message, fragment))
            else:
                raise AssertionError("no error for %r" % fields)

    with_fake_library(body)


if __name__ == "__main__":
    run(globals(), None, sys.argv)
