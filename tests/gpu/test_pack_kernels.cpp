// GPU unit test of the pack/unpack kernel: every layout x element size (1, 2, 4, 8) x direction (scatter pack,
// scatter unpack, gather pack, gather unpack) on random data, outputs poisoned first, bit-exact against the host
// implementation (tests/common/layout_reference.h). Shapes: the odd ones (D = 1, 3, 72; S/K = 1; K = 1, 3, 5;
// GQA head counts), plus one large enough for many tiles per CTA; tensors 16-byte aligned and deliberately not.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "layout/cuda/pack_kernels.h"
#include "layout_reference.h"
#include "pattern.h"

using basp::layout::Geometry;
using basp::layout::PackedWorkspace;
using basp::test::DeviceBytes;
using basp::test::kPoison;

namespace {

const char* kDirection[] = {"scatter pack", "gather pack", "scatter unpack", "gather unpack"};

// One case: all four directions of one shape, layout, element size and misalignment.
void run_case(const basp::test::Shape& shape, int32_t layout, int64_t elem, int64_t shift, std::mt19937_64& rng,
              basp::test::Tally& tally) {
  const auto geoms = basp::test::geometries(shape, layout, elem);
  const auto n = static_cast<int32_t>(geoms.size());
  const PackedWorkspace ws = basp::layout::make_packed_workspace(geoms.data(), n);
  const int64_t wire_bytes = ws.bytes();
  char name[256];

  std::vector<std::vector<std::byte>> host_in(n);
  std::vector<DeviceBytes> dev_in, dev_out;
  std::vector<const void*> in_ptr(n);
  std::vector<void*> out_ptr(n);
  for (int32_t t = 0; t < n; ++t) {
    host_in[t].resize(static_cast<size_t>(geoms[t].seq_tensor_bytes(0)));
    basp::test::fill_random(host_in[t], rng);
    dev_in.emplace_back(geoms[t].seq_tensor_bytes(0), shift);
    dev_out.emplace_back(geoms[t].seq_tensor_bytes(0), shift);
    dev_in[t].upload(host_in[t]);
    in_ptr[t] = dev_in[t].data();
    out_ptr[t] = dev_out[t].data();
  }
  std::vector<std::byte> host_wire(static_cast<size_t>(wire_bytes));
  basp::test::fill_random(host_wire, rng);
  DeviceBytes wire_in(wire_bytes);
  wire_in.upload(host_wire);
  DeviceBytes wire_out(wire_bytes);

  for (int dir = 0; dir < 4; ++dir) {
    std::snprintf(name, sizeof(name), "%s: K %lld b_loc %lld S/K %lld D %lld tensors %d layout %s elem %lld shift %lld",
                  kDirection[dir], static_cast<long long>(shape.k), static_cast<long long>(shape.b_loc),
                  static_cast<long long>(shape.s_loc), static_cast<long long>(shape.head_dim), n,
                  layout == BASP_LAYOUT_BSHD ? "BSHD" : "SBHD", static_cast<long long>(elem),
                  static_cast<long long>(shift));
    const bool pack = dir < 2;
    cudaError_t rc = cudaSuccess;
    if (pack) {
      wire_out.fill(kPoison);
      std::vector<std::byte> want(static_cast<size_t>(wire_bytes), std::byte{kPoison});
      for (int32_t t = 0; t < n; ++t) {
        if (dir == 0)
          basp::test::ref_scatter_pack(geoms[t], ws, t, host_in[t].data(), want.data());
        else
          basp::test::ref_gather_pack(geoms[t], ws, t, host_in[t].data(), want.data());
      }
      rc = dir == 0 ? basp::layout::cuda::launch_scatter_pack(geoms.data(), n, ws, in_ptr.data(), wire_out.data(), 0)
                    : basp::layout::cuda::launch_gather_pack(geoms.data(), n, ws, in_ptr.data(), wire_out.data(), 0);
      if (!tally.check(rc == cudaSuccess, name)) continue;
      TEST_CUDA(cudaDeviceSynchronize());
      const int64_t diff = basp::test::first_difference(wire_out.download(), want);
      if (!tally.check(diff < 0, name)) std::printf("  first wrong wire byte: %lld\n", static_cast<long long>(diff));
    } else {
      std::vector<std::vector<std::byte>> want(n);
      for (int32_t t = 0; t < n; ++t) {
        dev_out[t].fill(kPoison);
        want[t].assign(static_cast<size_t>(geoms[t].seq_tensor_bytes(0)), std::byte{kPoison});
        if (dir == 2)
          basp::test::ref_scatter_unpack(geoms[t], ws, t, host_wire.data(), want[t].data());
        else
          basp::test::ref_gather_unpack(geoms[t], ws, t, host_wire.data(), want[t].data());
      }
      rc = dir == 2 ? basp::layout::cuda::launch_scatter_unpack(geoms.data(), n, ws, wire_in.data(), out_ptr.data(), 0)
                    : basp::layout::cuda::launch_gather_unpack(geoms.data(), n, ws, wire_in.data(), out_ptr.data(), 0);
      if (!tally.check(rc == cudaSuccess, name)) continue;
      TEST_CUDA(cudaDeviceSynchronize());
      for (int32_t t = 0; t < n; ++t) {
        const int64_t diff = basp::test::first_difference(dev_out[t].download(), want[t]);
        if (!tally.check(diff < 0, name))
          std::printf("  tensor %d: first wrong byte: %lld\n", t, static_cast<long long>(diff));
      }
    }
  }
}

}  // namespace

int main() {
  const char* program = "test_gpu_pack_kernels";
  if (!basp::test::have_device(program)) return basp::test::kSkipped;
  std::mt19937_64 rng(31337);
  basp::test::Tally tally;
  std::vector<basp::test::Shape> shapes = basp::test::odd_shapes();
  shapes.push_back({8, 2, 512, 128, {32, 8, 8}});  // thousands of tiles: the grid-stride loop wraps
  for (const auto& shape : shapes)
    for (int32_t layout : {BASP_LAYOUT_BSHD, BASP_LAYOUT_SBHD})
      for (int64_t elem : {1, 2, 4, 8})
        for (int64_t shift : {int64_t{0}, elem}) run_case(shape, layout, elem, shift, rng, tally);
  return tally.finish(program);
}
