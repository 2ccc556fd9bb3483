"""basp.data.assign_documents and DocumentAssignment.pack against a brute force written here: the greedy rule
of basp.h in plain Python, numpy.array_split for the token ranges, a token-by-token walk for first_doc and the
position ids, and documents whose every value encodes (document, position). Also the ctypes mirror of
basp_doc_assignment_v1 against the header (abi_documents.c), agreement of all ranks, and the errors.

usage: mpirun -np N python3 test_documents.py <path of the abi_documents program built from basp.h>
"""
import ctypes
import dataclasses
import json
import random
import subprocess
import sys

import numpy as np
from mpi4py import MPI

import basp
from basp import Status, _abi
from basp.data import DocumentAssignment, assign_documents
from harness import check, expect_error, run

C = json.loads(subprocess.run([sys.argv[1]], check=True, stdout=subprocess.PIPE).stdout)
sys.argv = sys.argv[:1]

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
SEED = 1202
INVALID = Status.ERROR_INVALID_ARGUMENT
# B values giving G = 1 (Ulysses), G = N (K = 1) and what lies between for this N.
MICRO_BATCHES = sorted({1, 2, 3, N, 2 * N})


def reference_groups(lengths, num_groups):
    """The rule of basp.h, the plain way: decreasing length (ties: lower index), then the group with the fewest
    tokens, the smallest sum of squares, the lowest index; each group's documents ascending."""
    tokens, squares = [0] * num_groups, [0] * num_groups
    groups = [[] for _ in range(num_groups)]
    for d in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        g = min(range(num_groups), key=lambda j: (tokens[j], squares[j], j))
        tokens[g] += lengths[d]
        squares[g] += lengths[d] ** 2
        groups[g].append(d)
    return [sorted(g) for g in groups]


def reference(lengths, info):
    """What rank `info` (a basp.RankInfo) must get, by brute force."""
    groups = reference_groups(lengths, info.num_groups)
    docs = groups[info.group_index]
    stream = [(d, p) for d in docs for p in range(lengths[d])]  # (document, position) of every stream token
    part = np.array_split(np.arange(len(stream)), info.group_size)[info.group_position]
    begin = int(part[0]) if len(part) else len(stream)
    end = begin + len(part)
    first_doc, offset = -1, 0
    if len(part):
        first_doc, offset = docs.index(stream[begin][0]), stream[begin][1]
    totals = [sum(lengths[d] for d in g) for g in groups]
    total = sum(lengths)
    return dict(rank=info.rank, group_index=info.group_index, group_position=info.group_position,
                group_size=info.group_size, num_docs=len(docs), stream_tokens=len(stream), token_begin=begin,
                token_end=end, first_doc=first_doc, first_doc_offset=offset,
                max_seqlen=max((lengths[d] for d in docs), default=0), max_group_tokens=max(totals),
                imbalance=max(totals) * info.num_groups / total if total else 1.0, docs=docs,
                cu_seqlens=[sum(lengths[d] for d in docs[:j]) for j in range(len(docs) + 1)],
                positions=[p for _, p in stream[begin:end]], stream=stream[begin:end])


def batches():
    """Random batches (fixed seed, printed), the same on every rank: empty, tiny, ties, several thousand tokens."""
    rng = random.Random(SEED)
    out = [[], [1], [5, 3, 3, 2], [2, 1, 1, 1, 1], [3] * 7]
    for _ in range(6):
        top = rng.choice([4, 100, 5000])
        out.append([rng.randint(1, top) for _ in range(rng.randint(1, 30))])
    return out


def test_struct_mirror_matches_the_header():
    mirror = _abi.DOCUMENT_STRUCTS[C["struct"]]
    check.equal(ctypes.sizeof(mirror), C["sizeof"], "sizeof(basp_doc_assignment_v1)")
    check.equal([n for n, _ in mirror._fields_], [f["name"] for f in C["fields"]], "fields in order")
    for f in C["fields"]:
        desc = getattr(mirror, f["name"])
        check.equal((desc.offset, desc.size), (f["offset"], f["size"]), "%s offset, size" % f["name"])
    check.equal(bytes(mirror()).hex(), C["initializer"], "DocAssignmentStruct() vs its _INITIALIZER")
    check.equal((_abi.DOC_ASSIGNMENT_MAGIC, _abi.DOC_ASSIGNMENT_VERSION), (C["magic"], C["version"]), "constants")


def test_against_brute_force():
    if WORLD.Get_rank() == 0:
        print("test_documents.py: seed %d" % SEED, flush=True)
    for b in MICRO_BATCHES:
        with basp.Comm(WORLD, micro_batch=b) as comm:
            for lengths in batches():
                for r in range(N):
                    a = assign_documents(comm, lengths, rank=r)
                    want = reference(lengths, comm.query(rank=r))
                    what = "B %d, lengths %s, rank %d" % (b, lengths, r)
                    for name in ("rank", "group_index", "group_position", "group_size", "num_docs", "stream_tokens",
                                 "token_begin", "token_end", "first_doc", "first_doc_offset", "max_seqlen",
                                 "max_group_tokens", "docs"):
                        check.equal(getattr(a, name), want[name], "%s: %s" % (what, name))
                    check.true(abs(a.imbalance - want["imbalance"]) < 1e-12, "%s: imbalance" % what)
                    check.equal(a.cu_seqlens.dtype, np.dtype(np.int32), "cu_seqlens is int32 (flash-attn)")
                    check.equal(a.cu_seqlens.tolist(), want["cu_seqlens"], "%s: cu_seqlens" % what)
                    check.equal(a.position_ids().tolist(), want["positions"], "%s: position ids" % what)
                    check.equal(a.tokens, slice(want["token_begin"], want["token_end"]), "tokens slice")
                    check.equal(a, assign_documents(comm, lengths, rank=r), "%s: the same answer twice" % what)
                mine = assign_documents(comm, lengths)
                check.equal(mine, assign_documents(comm, lengths, rank=comm.rank), "rank -1 is the caller")
                # Every rank's view of every rank, gathered: all agree.
                views = [dataclasses.asdict(assign_documents(comm, lengths, rank=r)) for r in range(N)]
                for v in views:
                    v["cu_seqlens"] = v["cu_seqlens"].tolist()
                gathered = WORLD.allgather(views)
                check.true(all(g == views for g in gathered), "B %d: all ranks agree" % b)


def _documents(lengths, width=3):
    """Document d's token p, feature f holds d * 100000 + p * 10 + f: every value says where it came from."""
    return [(d * 100000 + np.arange(n)[:, None] * 10 + np.arange(width)[None, :]).astype(np.float64)
            for d, n in enumerate(lengths)]


def test_pack_numpy():
    lengths = [7, 2, 5, 4, 1, 6, 3, 11]
    documents = _documents(lengths)
    for b in MICRO_BATCHES:
        with basp.Comm(WORLD, micro_batch=b) as comm:
            for r in range(N):
                a = assign_documents(comm, lengths, rank=r)
                want = reference(lengths, comm.query(rank=r))
                tokens, positions = a.pack(documents)
                expected = np.array([[d * 100000 + p * 10 + f for f in range(3)] for d, p in want["stream"]],
                                    dtype=np.float64).reshape(-1, 3)
                check.equal(tokens.shape, (a.num_tokens, 3), "B %d rank %d: packed shape" % (b, r))
                check.true(np.array_equal(tokens, expected), "B %d rank %d: packed tokens" % (b, r))
                check.equal(positions.tolist(), want["positions"], "B %d rank %d: positions" % (b, r))
                check.true(np.array_equal(positions, (tokens[:, 0] % 100000) // 10), "positions from the data")
                check.equal(tokens.dtype, np.dtype(np.float64), "dtype kept")
            # The group's ranks' slices, end to end, are its whole stream.
            for g in range(comm.num_groups):
                members = comm.group_ranks(g)
                parts = [assign_documents(comm, lengths, rank=r).pack(documents)[0] for r in members]
                docs = reference_groups(lengths, comm.num_groups)[g]
                whole = np.concatenate([documents[d] for d in docs]) if docs else np.zeros((0, 3))
                check.true(np.array_equal(np.concatenate(parts), whole), "B %d group %d: slices tile" % (b, g))
    # Token ids ([L_i]) work as well, and a rank without tokens gets an empty [0] slice of the right dtype.
    with basp.Comm(WORLD, micro_batch=1) as comm:
        ids = [np.arange(3, dtype=np.int32) + 10 * d for d in range(2)]
        a = assign_documents(comm, [3, 3], rank=N - 1)
        tokens, positions = a.pack(ids)
        stream = np.concatenate(ids)
        check.true(np.array_equal(tokens, stream[a.tokens]), "token ids packed")
        check.equal((tokens.dtype, tokens.ndim), (np.dtype(np.int32), 1), "token ids keep dtype and rank")
        a = assign_documents(comm, [1], rank=N - 1)
        tokens, positions = a.pack([np.ones((1, 4), np.float32)])
        want_tokens = 1 if N == 1 else 0
        check.equal((tokens.shape, len(positions)), ((want_tokens, 4), want_tokens), "last rank of a 1-token batch")
        tokens, positions = assign_documents(comm, []).pack([])
        check.equal((len(tokens), len(positions)), (0, 0), "an empty batch packs to nothing")


def test_pack_torch():
    try:
        import torch
    except ImportError:
        check.true(True, "no PyTorch: skipped")
        return
    lengths = [5, 3, 3, 2, 9]
    documents = [torch.from_numpy(x) for x in _documents(lengths, width=2)]
    with basp.Comm(WORLD, micro_batch=min(N, 2)) as comm:
        a = assign_documents(comm, torch.tensor(lengths))
        tokens, positions = a.pack(documents)
        want = reference(lengths, comm.query())
        check.true(isinstance(tokens, torch.Tensor) and isinstance(positions, torch.Tensor), "torch in, torch out")
        check.equal(positions.dtype, torch.int64, "positions are int64")
        check.equal(positions.tolist(), want["positions"], "torch positions")
        numpy_tokens, _ = a.pack([d.numpy() for d in documents])
        check.true(np.array_equal(tokens.numpy(), numpy_tokens), "torch and numpy pack alike")


def test_capacity_and_errors():
    with basp.Comm(WORLD, micro_batch=1) as comm:  # one group: every document in group 0
        check.equal(assign_documents(comm, [6, 6, 6], capacity=18).stream_tokens, 18, "exactly the capacity")
        expect_error(lambda: assign_documents(comm, [6, 6, 6], capacity=17), INVALID, "basp_comm_assign_documents",
                     "group 0 would hold 18 tokens, more than the capacity (17)")
        expect_error(lambda: assign_documents(comm, [100, 9000], capacity=8192), INVALID,
                     "document 1 (9000 tokens) is longer than the capacity (8192)")
        expect_error(lambda: assign_documents(comm, [4, 0, 2]), INVALID, "lengths[1] (0) must be positive")
        expect_error(lambda: assign_documents(comm, [4, -3]), INVALID, "lengths[1] (-3) must be positive")
        expect_error(lambda: assign_documents(comm, [4], rank=N), INVALID,
                     "rank (%d) is outside 0..%d (or -1 for the calling rank)" % (N, N - 1))
        expect_error(lambda: assign_documents(comm, [4], capacity=-1), INVALID, "capacity (-1)")
        # The binding's own checks, before the library is called.
        expect_error(lambda: assign_documents(comm, [[1, 2]]), INVALID, "basp.data.assign_documents",
                     "lengths has shape (1, 2)")
        expect_error(lambda: assign_documents(comm, [1.5, 2]), INVALID, "lengths has dtype float64")
        expect_error(lambda: assign_documents(comm, [1], rank=2 ** 40), INVALID, "rank (%d) does not fit" % 2 ** 40)
        expect_error(lambda: assign_documents(comm, [1], capacity="big"), INVALID, "capacity ('big')")
        expect_error(lambda: assign_documents("comm", [1]), INVALID, "comm (a str) is not a basp.Comm")
        a = assign_documents(comm, [3, 2])
        expect_error(lambda: a.pack([np.zeros((3, 1))]), INVALID, "documents has 1 entries",
                     "holds document 1")
        expect_error(lambda: a.pack([np.zeros((3, 1)), np.zeros((4, 1))]), INVALID,
                     "documents[1] has shape (4, 1) but document 1 has 2 tokens")
        expect_error(lambda: a.pack([np.zeros((3, 1)), [0, 0]]), INVALID, "documents[1] (a builtins.list)")
        # Frozen: the answer cannot be changed behind the caller's back.
        try:
            a.token_begin = 5
        except dataclasses.FrozenInstanceError:
            check.true(True, "fields are frozen")
        else:
            raise AssertionError("a DocumentAssignment field could be assigned")
        check.true(not a.cu_seqlens.flags.writeable, "cu_seqlens is read-only")
        check.true(isinstance(a, DocumentAssignment), "the type is exported from basp.data")
    closed = basp.Comm(WORLD, micro_batch=1)
    closed.close()
    expect_error(lambda: assign_documents(closed, [1]), Status.ERROR_INVALID_HANDLE, "comm is NULL")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
