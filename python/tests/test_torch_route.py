"""basp.torch.comm_from_process_group's two routes, decided and wired, in one process and without a GPU (CTest
python_torch_route):
  "nccl"  the group's own communicator (ProcessGroupNCCL._comm_ptr(), PyTorch >= 2.8) -> basp.Comm.from_nccl;
  "oob"   basp.Comm.from_oob over the group's all_gather (libbasp exchanges NCCL unique ids itself).
What it checks: the decision (basp._torch_group._choose_route, no side effect) over every combination of its
inputs against rules written out again here; an unknown route named; a real one-rank gloo group taking the OOB
route (without a GPU that ends in BASP_ERROR_CUDA, whose message names the route; with one, a comm whose
created_by is "oob"); a fake NCCL-like group whose _comm_ptr() is 0 (or missing, or raising) falling back to
OOB; the NCCL route's wiring with a fake pointer (torch.cuda.synchronize first, the pointer and the config to
Comm.from_nccl, the group kept as the comm's parent); libnccl files that differ refused, both named, before
anything is called; how PyTorch's libnccl file is found (the DT_NEEDED reader against readelf). The GPU side of
both routes is test_torch_ranks.py's (torchrun)."""
import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

import basp
import basp.torch  # noqa: F401 -- registers basp.torch
from basp import _library, _torch_group as tg
from harness import check, expect_error, run

INV = basp.Status.ERROR_INVALID_ARGUMENT
UNS = basp.Status.ERROR_UNSUPPORTED
POINTER = 0x7F00DEAD0000
TMP = tempfile.mkdtemp(prefix="basp_route_")
LIB_A = os.path.join(TMP, "a", "libnccl.so.2")
LIB_A_LINK = os.path.join(TMP, "link", "libnccl.so.2")  # a symbolic link to LIB_A: the same file
LIB_B = os.path.join(TMP, "b", "libnccl.so.2")
for path in (LIB_A, LIB_B):
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(path)
os.makedirs(os.path.dirname(LIB_A_LINK))
os.symlink(LIB_A, LIB_A_LINK)


@contextlib.contextmanager
def patched(*replacements):
    """(object, attribute, value) triples set for the duration, then restored (a class's own attribute as it is
    stored: a classmethod stays one)."""
    saved = [(obj, name, vars(obj)[name] if isinstance(obj, type) else getattr(obj, name))
             for obj, name, _ in replacements]
    try:
        for obj, name, value in replacements:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def expected_route(route, backend, version, has_ptr, ptr, torch_nccl, basp_nccl):
    """The rules of docs/python.md, written out again: ("nccl" | "oob", fragment of the reason) or
    ("raise", status, fragments)."""
    if route == "oob":
        return ("oob", "route='oob'")
    parts = backend.split(",")
    if backend != "nccl" and "cuda:nccl" not in parts:
        blocker = (INV, "backend is %r" % backend)
    elif version[0] < 2 or (version[0] == 2 and version[1] < 8):
        blocker = (UNS, "PyTorch %d.%d cannot lend" % version)
    elif not has_ptr:
        blocker = (UNS, "has no _comm_ptr")
    elif ptr is None:
        blocker = (INV, "_comm_ptr() is not readable")
    elif ptr == 0:
        blocker = (INV, "_comm_ptr() is 0")
    elif basp_nccl is None:
        blocker = (UNS, "cannot say which libnccl it runs")
    elif torch_nccl is None:
        blocker = (UNS, "which NCCL PyTorch runs cannot be told")
    elif os.path.realpath(torch_nccl) != os.path.realpath(basp_nccl):
        return ("raise", INV, (torch_nccl, basp_nccl, "means nothing to another", "route='oob'"))
    else:
        return ("nccl", basp_nccl)
    if route == "auto":
        return ("oob", blocker[1])
    return ("raise", blocker[0], ("route='nccl'", blocker[1]))


def test_the_decision_for_every_input():
    routes = ("auto", "nccl", "oob")
    backends = ("nccl", "gloo", "mpi", "cpu:gloo,cuda:nccl", "cpu:gloo", "ucc")
    versions = ((1, 13), (2, 7), (2, 8), (2, 11), (3, 0))
    pointers = (None, 0, POINTER)
    torch_files = (None, LIB_A, LIB_A_LINK, LIB_B)
    basp_files = (None, LIB_A)
    seen = {"nccl": 0, "oob": 0, "raise": 0}
    for route, backend, version, has_ptr, ptr, torch_nccl, basp_nccl in itertools.product(
            routes, backends, versions, (False, True), pointers, torch_files, basp_files):
        inputs = (route, backend, version, has_ptr, ptr, torch_nccl, basp_nccl)
        want = expected_route(*inputs)
        seen[want[0]] += 1
        try:
            got = tg._choose_route(*inputs)
        except basp.Error as e:
            check.equal(want[0], "raise", "%r raised %s" % (inputs, e))
            check.equal(e.status, want[1], "status for %r (%s)" % (inputs, e))
            for fragment in want[2]:
                check.true(fragment in e.message, "%r: %r lacks %r" % (inputs, e.message, fragment))
            check.true(e.message.startswith("basp.torch.comm_from_process_group: "), "the caller named: %r" % e)
            continue
        check.equal(got[0], want[0], "the route for %r (%s)" % (inputs, got[1]))
        check.true(want[1] in got[1], "%r: the reason %r lacks %r" % (inputs, got[1], want[1]))
    check.true(min(seen.values()) > 0, "every outcome occurs: %r" % seen)
    # The symbolic link is the same file as its target: the NCCL route.
    check.equal(tg._choose_route("auto", "nccl", (2, 8), True, POINTER, LIB_A_LINK, LIB_A)[0], "nccl",
                "a link to libbasp's libnccl is libbasp's libnccl")


def test_an_unknown_route_is_named():
    for bad in ("NCCL", "", "mpi", None, 1, ("auto",)):
        expect_error(lambda: tg._choose_route(bad, "nccl", (2, 9), True, POINTER, LIB_A, LIB_A), INV,
                     "route (%r) is not one of 'auto', 'nccl', 'oob'" % (bad,))
        expect_error(lambda: basp.torch.comm_from_process_group(micro_batch=2, route=bad), INV,
                     "basp.torch.comm_from_process_group: route (%r)" % (bad,))


def test_the_torch_version():
    for text, want in (("2.8.0+cu128", (2, 8)), ("2.10.0a0+git1234", (2, 10)), ("1.13.0a0", (1, 13)),
                       ("3.0", (3, 0)), ("nightly", (0, 0))):
        check.equal(tg._torch_version(text), want, "version of %r" % text)
    check.equal(tg._torch_version(), tuple(int(x) for x in torch.__version__.split(".")[:2]), "this PyTorch's")


def init_gloo():
    if not dist.is_initialized():
        store = dist.FileStore(os.path.join(TMP, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def forbidden(name):
    def call(*args, **kwargs):
        raise AssertionError("%s was called" % name)
    return call


def test_a_gloo_group_takes_the_oob_route():
    init_gloo()
    check.equal(tg._backend_name(None), "gloo", "the world is a gloo group")
    route, why, pointer = tg._route_for(None, "auto", "gloo")
    check.equal((route, pointer), ("oob", None), "auto on gloo: OOB (%s)" % why)
    check.true("'gloo'" in why, "the reason names the backend: %r" % why)
    with patched((basp.Comm, "from_nccl", forbidden("Comm.from_nccl"))):
        for route in ("auto", "oob"):
            try:
                comm = basp.torch.comm_from_process_group(micro_batch=2, route=route, timeout_ms=60000)
            except basp.Error as e:
                check.true(not torch.cuda.is_available(), "only a machine without a GPU fails (%s)" % e)
                check.equal(e.status, basp.Status.ERROR_CUDA, "no GPU: BASP_ERROR_CUDA (%s)" % e)
                for fragment in ("basp_comm_create_oob", "the NCCL backend needs a CUDA device",
                                 "[basp.torch.comm_from_process_group took route 'oob': ",
                                 "'gloo'" if route == "auto" else "route='oob' was asked for"):
                    check.true(fragment in e.message, "route %s: %r lacks %r" % (route, e.message, fragment))
                continue
            with comm:
                check.equal(comm.created_by, "oob", "route %s on gloo made the comm over the OOB" % route)
    with patched((basp.Comm, "from_oob", forbidden("Comm.from_oob")),
                 (basp.Comm, "from_nccl", forbidden("Comm.from_nccl"))):
        expect_error(lambda: basp.torch.comm_from_process_group(micro_batch=2, route="nccl"), INV,
                     "basp.torch.comm_from_process_group: route='nccl': the group's backend is 'gloo', not nccl")


class FakeBackend:
    """ProcessGroupNCCL's part that matters here: _comm_ptr() (or none, with comm_ptr=False)."""

    def __init__(self, comm_ptr):
        self.value = comm_ptr
        if comm_ptr is not False:
            self._comm_ptr = self._read

    def _read(self):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class FakeGroup:
    """A ProcessGroup as comm_from_process_group reaches it: _get_backend(device) -> its NCCL backend."""

    def __init__(self, comm_ptr):
        self.backend = FakeBackend(comm_ptr)
        self.devices = []

    def _get_backend(self, device):
        self.devices.append(device)
        return self.backend


class Recorder:
    """Stands in for Comm.from_oob, Comm.from_nccl, torch.cuda.synchronize and ProcessGroupAllgather: records each
    call in one shared list, in order."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, result=None, error=None):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if error is not None:
                raise error
            return result() if callable(result) else result
        return call


class Made:
    """What the fake creations return (a comm needs a GPU)."""


@contextlib.contextmanager
def fake_world(recorder, version=(2, 9), torch_nccl="basp's", basp_nccl=LIB_A, nccl_error=None):
    """comm_from_process_group over a FakeGroup: one rank, backend nccl, PyTorch `version`, the libnccl files given
    ("basp's": the same as basp_nccl), and every call that would reach torch or libbasp recorded instead."""
    torch_file = basp_nccl if torch_nccl == "basp's" else torch_nccl
    with patched((tg, "_process_group_rank", lambda group, where: (0, 1)),
                 (tg, "_backend_name", lambda group: "nccl"),
                 (tg, "_torch_version", lambda: version),
                 (tg, "_torch_nccl_file", lambda: torch_file),
                 (tg, "_basp_nccl_file", lambda: basp_nccl),
                 (tg, "ProcessGroupAllgather", recorder("ProcessGroupAllgather", result="an all-gather")),
                 (torch.cuda, "synchronize", recorder("torch.cuda.synchronize")),
                 (basp.Comm, "from_oob", recorder("Comm.from_oob", result=Made)),
                 (basp.Comm, "from_nccl", recorder("Comm.from_nccl", result=Made, error=nccl_error))):
        yield


def names(recorder):
    return [c[0] for c in recorder.calls]


def test_a_group_without_a_communicator_falls_back_to_oob():
    for value, fragment in ((0, "_comm_ptr() is 0"), (False, "has no _comm_ptr"),
                            (RuntimeError("aborted"), "_comm_ptr() is not readable")):
        group = FakeGroup(value)
        rec = Recorder()
        with fake_world(rec):
            route, why, pointer = tg._route_for(group, "auto", "nccl")
            check.equal((route, pointer), ("oob", None), "_comm_ptr %r: OOB (%s)" % (value, why))
            check.true(fragment in why, "the reason %r names %r" % (why, fragment))
            check.true(group.devices and all(d.type == "cuda" for d in group.devices), "asked for the CUDA backend")
            comm = basp.torch.comm_from_process_group(micro_batch=2, group=group, timeout_ms=5000)
            check.true(isinstance(comm, Made), "comm_from_process_group returned what from_oob made")
            check.equal(names(rec), ["ProcessGroupAllgather", "Comm.from_oob"], "the OOB route only")
            check.equal(rec.calls[0][1], (group,), "the all-gather over that group")
            config = rec.calls[1][2]["config"]
            check.equal((config.micro_batch, config.timeout_ms, config.backend), (2, 5000, basp.Backend.NCCL),
                        "from_oob's config")
            # Asked for by name, the NCCL route refuses and says why.
            expect_error(lambda: basp.torch.comm_from_process_group(micro_batch=2, group=group, route="nccl"),
                         INV if value is not False else UNS, "route='nccl'", fragment)
            check.equal(len(rec.calls), 2, "nothing called for the refused route")


def test_the_nccl_route_hands_the_pointer_to_from_nccl():
    group = FakeGroup(POINTER)
    for route in ("auto", "nccl"):
        rec = Recorder()
        with fake_world(rec):
            check.equal(tg._route_for(group, route, "nccl")[0::2], ("nccl", POINTER), "route %s: NCCL" % route)
            comm = basp.torch.comm_from_process_group(micro_batch=4, group=group, num_groups=2, timeout_ms=1234,
                                                      route=route)
        check.true(isinstance(comm, Made), "from_nccl's comm returned")
        check.equal(names(rec), ["torch.cuda.synchronize", "Comm.from_nccl"], "synchronize, then from_nccl")
        args, kwargs = rec.calls[1][1:]
        check.equal(args, (POINTER,), "the group's ncclComm_t")
        config = kwargs["config"]
        check.equal((config.micro_batch, config.num_groups, config.timeout_ms, config.backend),
                    (4, 2, 1234, basp.Backend.NCCL), "the config made from the arguments")
        check.true(comm._parent is group, "the comm keeps the process group (its communicator's owner) alive")
    # A failure of the creation names the route and why it was taken.
    rec = Recorder()
    with fake_world(rec, nccl_error=basp.Error(basp.Status.ERROR_NCCL, "basp_comm_create_nccl: split failed")):
        e = expect_error(lambda: basp.torch.comm_from_process_group(micro_batch=2, group=group),
                         basp.Status.ERROR_NCCL, "basp_comm_create_nccl: split failed",
                         "[basp.torch.comm_from_process_group took route 'nccl': the group's own NCCL communicator")
        check.true(str(e).startswith("BASP_ERROR_NCCL: basp_comm_create_nccl"), "str(error): %s" % e)
    # route="oob" never reads the pointer.
    rec = Recorder()
    with fake_world(rec):
        quiet = FakeGroup(POINTER)
        basp.torch.comm_from_process_group(micro_batch=2, group=quiet, route="oob")
        check.equal((names(rec), quiet.devices), (["ProcessGroupAllgather", "Comm.from_oob"], []),
                    "route oob: the all-gather, the pointer never asked")


def test_libraries_that_differ_are_refused_naming_both():
    group = FakeGroup(POINTER)
    for route in ("auto", "nccl"):
        rec = Recorder()
        with fake_world(rec, torch_nccl=LIB_B, basp_nccl=LIB_A):
            expect_error(lambda: basp.torch.comm_from_process_group(micro_batch=2, group=group, route=route), INV,
                         "basp.torch.comm_from_process_group: PyTorch's NCCL communicator comes from %s but "
                         "libbasp runs %s" % (LIB_B, LIB_A), "route='oob'")
        check.equal(rec.calls, [], "route %s: nothing called" % route)
    rec = Recorder()
    with fake_world(rec, torch_nccl=LIB_A_LINK, basp_nccl=LIB_A):  # one file under two names
        basp.torch.comm_from_process_group(micro_batch=2, group=group)
    check.equal(names(rec), ["torch.cuda.synchronize", "Comm.from_nccl"], "a link to the same file: NCCL route")
    rec = Recorder()
    with fake_world(rec, torch_nccl=LIB_B, basp_nccl=LIB_A):
        basp.torch.comm_from_process_group(micro_batch=2, group=group, route="oob")
    check.equal(names(rec), ["ProcessGroupAllgather", "Comm.from_oob"], "route oob: no check, the OOB route")
    for missing in ("torch", "basp"):
        rec = Recorder()
        files = {"torch_nccl": None} if missing == "torch" else {"basp_nccl": None, "torch_nccl": LIB_A}
        with fake_world(rec, **files):
            basp.torch.comm_from_process_group(micro_batch=2, group=group)
            check.equal(names(rec), ["ProcessGroupAllgather", "Comm.from_oob"], "%s's file unknown: OOB" % missing)
            expect_error(lambda: basp.torch.comm_from_process_group(micro_batch=2, group=group, route="nccl"),
                         UNS, "route='nccl'")


def test_which_libnccl_pytorch_runs():
    torch_cuda = "/site/torch/lib/libtorch_cuda.so"
    wheel = "/site/nvidia/nccl/lib/libnccl.so.2"
    system = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.27.3"
    cases = (
        # (libtorch_cuda mapped, its DT_NEEDED, libnccl files mapped) -> the file
        ([torch_cuda], ["libc10_cuda.so", "libnccl.so.2"], [wheel], wheel),
        ([torch_cuda], ["libnccl.so.2"], [system, wheel], system),
        ([torch_cuda], ["libc10_cuda.so"], [wheel], torch_cuda),  # NCCL linked into libtorch_cuda
        ([torch_cuda], ["libnccl.so.2"], [], None),
        ([torch_cuda], None, [wheel], wheel),  # unreadable: the one libnccl mapped
        ([], None, [wheel], wheel),
        ([], None, [wheel, system], None),
        ([], None, [], None),
    )
    for torch_libs, needed, nccl_files, want in cases:
        with patched((_library, "mapped_files", lambda prefix="": torch_libs if prefix == "libtorch_cuda" else []),
                     (_library, "mapped_nccl_files", lambda: nccl_files),
                     (_library, "elf_needed", lambda path: needed)):
            check.equal(tg._torch_nccl_file(), want, "libtorch_cuda %r needing %r, libnccl %r" % (
                torch_libs, needed, nccl_files))
    # This process: PyTorch without CUDA maps no libtorch_cuda, and then the one libnccl mapped (libbasp's, where it
    # was built with NCCL) is the answer; with CUDA, a libnccl mapped or libtorch_cuda itself.
    mapped, torch_cuda = _library.mapped_nccl_files(), _library.mapped_files("libtorch_cuda")
    found = tg._torch_nccl_file()
    if not torch_cuda:
        check.equal(found, mapped[0] if len(mapped) == 1 else None, "this process, no libtorch_cuda")
    else:
        check.true(found is None or found in mapped + torch_cuda, "this process: %r" % found)


def test_the_dt_needed_reader():
    readelf = shutil.which("readelf")
    files = [_library.path(), sys.executable] + _library.mapped_files("libc.so")[:1]
    for path in files:
        needed = _library.elf_needed(path)
        check.true(isinstance(needed, list), "%s: DT_NEEDED read (%r)" % (path, needed))
        if readelf:
            out = subprocess.run([readelf, "-d", path], capture_output=True, text=True, check=True).stdout
            expected = [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines() if "(NEEDED)" in line]
            check.equal(needed, expected, "%s: DT_NEEDED as readelf -d lists it" % path)
    if basp.features()["nccl"]:
        check.true(any(n.startswith("libnccl.so") for n in _library.elf_needed(_library.path())),
                   "libbasp built with NCCL needs a libnccl")
    check.equal(_library.elf_needed(os.path.join(TMP, "a", "libnccl.so.2")), None, "not an ELF file")
    check.equal(_library.elf_needed(os.path.join(TMP, "none")), None, "no file")


def test_destroy_the_group():
    init_gloo()
    dist.destroy_process_group()
    check.true(not dist.is_initialized(), "torch.distributed is down again")


if __name__ == "__main__":
    try:
        run(globals(), None, sys.argv)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
