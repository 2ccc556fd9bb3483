"""basp.Plan.choose_head_chunks (basp_choose_head_chunks): the ctypes mirror of basp_head_chunk_choice_v1 against
the header (abi_head_chunks.c); T(1) against the layer without chunks derived here from the comm's cost model (one
node: each rank sends each of its K - 1 peers its S/K tokens of the peer's Hq/K heads); the choice 1 without
attention and with attention that dwarfs the exchange, more than 1 with at least a 5% gain in between (K > 1);
the same answer on every rank; collective=True giving every rank the answer for the largest attention; a plan of
more chunks than the binding's first array; the errors.

usage: mpirun -np N python3 test_head_chunks.py <path of the abi_head_chunks program built from basp.h>
"""
import ctypes
import json
import subprocess
import sys

from mpi4py import MPI

import basp
from basp import Status, _head_chunks
from harness import check, expect_error, run

C = json.loads(subprocess.run([sys.argv[1]], check=True, stdout=subprocess.PIPE).stdout)
sys.argv = sys.argv[:1]

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
INVALID = Status.ERROR_INVALID_ARGUMENT
S, HQ, D = 8192, 32, 128


def one_node():
    return WORLD.Split_type(MPI.COMM_TYPE_SHARED).Get_size() == N


def test_struct_mirror_matches_the_header():
    mirror = _head_chunks.HEAD_CHUNK_STRUCTS[C["struct"]]
    check.equal(ctypes.sizeof(mirror), C["sizeof"], "sizeof(basp_head_chunk_choice_v1)")
    check.equal([n for n, _ in mirror._fields_], [f["name"] for f in C["fields"]], "fields in order")
    for f in C["fields"]:
        desc = getattr(mirror, f["name"])
        check.equal((desc.offset, desc.size), (f["offset"], f["size"]), "%s offset, size" % f["name"])
    check.equal(bytes(mirror()).hex(), C["initializer"], "HeadChunkChoiceStruct() vs its _INITIALIZER")
    check.equal((_head_chunks.HEAD_CHUNK_CHOICE_MAGIC, _head_chunks.HEAD_CHUNK_CHOICE_VERSION),
                (C["magic"], C["version"]), "constants")


def test_the_model_on_the_plan():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        plan = comm.plan(S, D, HQ, basp.Dtype.FP16)
        m = comm.cost_model
        per_peer = (S // N) * (HQ // N) * D * 2
        exchange = m.a0 + m.a1 * (N - 1) + m.beta_node * (per_peer * (N - 1)) if N > 1 else 0.0
        mid = 2.0 * exchange if N > 1 else 0.01
        for attention in (0.0, mid, 1e6):
            c = plan.choose_head_chunks(attention)
            check.true(isinstance(c, basp.HeadChunkChoice), "a basp.HeadChunkChoice")
            check.equal((c.max_head_chunks, len(c.predicted)), (HQ // N, HQ // N), "max_head_chunks")
            check.equal(c.attention_seconds, attention, "attention_seconds")
            everyone = WORLD.allgather((c.num_chunks, c.predicted))
            check.true(all(x == everyone[0] for x in everyone), "every rank's answer is rank 0's")
            if not one_node():
                continue
            check.true(abs(c.predicted[0] - (2 * exchange + attention)) <= 1e-12 * (2 * exchange + attention),
                       "T(1) %r vs the hand-derived %r" % (c.predicted[0], 2 * exchange + attention))
            if attention == mid and N > 1:
                check.true(c.num_chunks > 1, "attention beside the exchange: chunks (%d)" % c.num_chunks)
                check.true(c.predicted[c.num_chunks - 1] < 0.95 * c.predicted[0], "a 5% gain")
            else:
                check.equal(c.num_chunks, 1, "no chunks at attention %r" % attention)
        named = plan.choose_head_chunks(mid, gather=plan, num_tokens=S)
        check.equal(named, plan.choose_head_chunks(mid, num_tokens=None), "the same plan as the gather, num_tokens")


def test_collective_takes_the_maximum():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        plan = comm.plan(S, D, HQ, basp.Dtype.FP16)
        mine = 0.004 * (WORLD.Get_rank() + 1)
        c = plan.choose_head_chunks(mine, collective=True)
        check.equal(c.attention_seconds, 0.004 * N, "the maximum over the group")
        check.equal(c, plan.choose_head_chunks(0.004 * N), "the local answer for the maximum")


def test_more_chunks_than_the_first_array():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        plan = comm.plan(64 * N, 1, 300 * N, basp.Dtype.BYTE)
        c = plan.choose_head_chunks(0.001)
        check.equal((c.max_head_chunks, len(c.predicted)), (300, 300), "300 chunks, every T(C)")
        raw = (ctypes.c_double * 300)()
        choice = _head_chunks.HeadChunkChoiceStruct()
        check.equal(basp._library.lib().basp_choose_head_chunks(plan.handle, None, -1, ctypes.c_double(0.001), 0,
                                                                 ctypes.byref(choice), raw, 300), 0, "the C call")
        check.equal(c.predicted, list(raw), "the C call's T(C)")


def test_errors():
    with basp.Comm(WORLD, micro_batch=1) as comm, basp.Comm(WORLD, micro_batch=1) as other:
        plan = comm.plan(S, D, HQ, basp.Dtype.FP16)
        expect_error(lambda: plan.choose_head_chunks(-1.0), INVALID, "attention_seconds (-1)")
        expect_error(lambda: plan.choose_head_chunks(float("nan")), INVALID, "attention_seconds (nan)")
        expect_error(lambda: plan.choose_head_chunks("soon"), INVALID, "attention_seconds ('soon')")
        expect_error(lambda: plan.choose_head_chunks(0.0, num_tokens=5), INVALID, "num_tokens (5)")
        expect_error(lambda: plan.choose_head_chunks(0.0, num_tokens=2 ** 70), INVALID, "beyond int64")
        expect_error(lambda: plan.choose_head_chunks(0.0, gather="q"), INVALID, "gather (a str) is not a basp.Plan")
        expect_error(lambda: plan.choose_head_chunks(0.0, gather=other.plan(S, D, HQ, basp.Dtype.FP16)), INVALID,
                     "different comms")
        thd = comm.plan(None, D, HQ, basp.Dtype.FP16, layout="thd", token_capacity=S)
        expect_error(lambda: thd.choose_head_chunks(0.0), INVALID, "num_tokens (-1) is outside 0..token_capacity")
        check.equal(thd.choose_head_chunks(0.0, num_tokens=S).max_head_chunks, HQ // N, "THD with its T")
        plan.close()
        expect_error(lambda: plan.choose_head_chunks(0.0), Status.ERROR_INVALID_HANDLE, "scatter")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
