#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (tests/fuzz/seeds/<target>/): valid structs and command lines that
the fuzzer mutates from. Run from anywhere; the files are committed, so this only needs rerunning when the
structs grow. The topology target's seeds are the recorded topologies of tests/fixtures/topology."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# basp_comm_config_v1: size, magic, version, micro_batch, num_groups, backend, placement, reserved0, timeout_ms
def comm_config(b, g=-1, backend=0, placement=0, size=48, timeout=-1):
    return struct.pack("<QIIqiiiiq", size, 0x42434F4D, 1, b, g, backend, placement, 0, timeout)


# basp_plan_desc_v1: size, magic, version, layout, dtype, seq_len, head_dim, num_tensors, reserved0, num_heads[8]
def plan_desc(layout, dtype, s, d, heads):
    h = list(heads) + [0] * (8 - len(heads))
    return struct.pack("<QIIiiqqii8q", 112, 0x42504C4E, 1, layout, dtype, s, d, len(heads), 0, *h)


capi = "fuzz_capi_structs"
write(capi, "comm_default", b"\x00" + comm_config(1))
write(capi, "comm_first_layout", b"\x00" + comm_config(4, 2, 0, 1, size=40)[:40])
write(capi, "comm_timeout", b"\x00" + comm_config(2, timeout=1500))
write(capi, "plan_qkv", b"\x01" + plan_desc(0, 4, 64, 8, [32, 8, 8]))
write(capi, "plan_sbhd", b"\x01" + plan_desc(1, 5, 16, 4, [4]))
write(capi, "rank_info", b"\x02" + struct.pack("<iq", -1, 64) + struct.pack("<QII", 88, 0x4252494E, 1) + bytes(72))
write(capi, "plan_info", b"\x03" + struct.pack("<QII", 192, 0x42504946, 1) + bytes(176))
write(capi, "plan_k4", b"\x04" + plan_desc(0, 3, 4096, 128, [32, 8, 8]) + struct.pack("<iii", 4, 1, 2))
write(capi, "plan_k8_gqa", b"\x04" + plan_desc(1, 1, 1024, 64, [16, 8, 8, 16]) + struct.pack("<iii", 8, 7, 1))

perf = "fuzz_perf_args"
for name, argv in {
    "defaults": [],
    "sweep": ["-b", "1M", "-e", "64M", "-f", "2", "-n", "5", "-w", "1", "-c", "1"],
    "shape": ["-B", "1,2,4,8", "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "-d", "bf16"],
    "json": ["-J", "out.json", "--layout", "sbhd", "--mode", "basp", "--placement", "contiguous"],
    "mla": ["--model", "deepseek-v3", "--mla", "--head-dims", "192,192,128", "--pass", "both", "-B", "1,8"],
}.items():
    write(perf, name, b"\x00".join(a.encode() for a in argv))

cost = "fuzz_cost_model"
valid = (b"basp-cost-model 1\na0 2e-05\na1 5e-06\nbeta_node 2e-10\nbeta_network 8e-11\nc2 0\nc1 0\n"
         b"source calibrated\nworld_size 16\nnum_nodes 2\nnote 2026-01-05 two nodes\n")
write(cost, "valid", valid)
write(cost, "required_only", valid[:valid.index(b"source")])
write(cost, "comments_crlf", valid.replace(b"\n", b"\r\n").replace(b"c2 0", b"# attention\r\n\r\nc2 0"))
write(cost, "exact_doubles", b"basp-cost-model 1\na0 4.9406564584124654e-324\na1 1.7976931348623157e+308\n"
      b"beta_node 2.2250738585072014e-308\nbeta_network 0.1\nc2 1e-12\nc1 1000\nsource \nnote \n")
write(cost, "bad_number", valid.replace(b"a1 5e-06", b"a1 5e-06x"))
write(cost, "duplicate", valid + b"a0 1\n")
