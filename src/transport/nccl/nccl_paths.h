// The NCCL backend's device paths (nccl_executor.h): what one execute enqueues on the caller's stream for a plan's
// path, for the ordinary and the batch executors alike (internal to transport/nccl).
//   LocalCopyPath  K = 1: the two layouts of a tensor are the same bytes, one device-to-device copy per tensor
//   AllToAllPath   the textbook shape: one pack launch, one ncclAlltoAll, one unpack launch
//   GeneralPath    any other shape: grouped ncclSend/ncclRecv per (tensor, peer) chunk, the summing unpack of
//                  replicated heads, and for a batch plan (BatchWiring) the tags and the guarded unpacks
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/error.h"
#include "common/trace.h"
#include "layout/cuda/pack_kernels.h"
#include "layout/packed_workspace.h"
#include "plan/exchange.h"
#include "transport/nccl/nccl_util.h"

namespace basp::transport::nccl::paths {

inline void check_launch(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) detail::fail_cuda(rc, what);
}

// The ncclSend/ncclRecv calls of one exchange in `direction`, inside the caller's NCCL group: for every tensor t
// and position j, the rows this rank sends j and those j sends it, between the send and receive workspaces `ws`
// (chunk_offset(t, j)). A head chunk moves its piece of each (Geometry::moved_bytes at moved_offset), so the
// pieces of one round's chunks are disjoint and a gather's contributions wait in place for the chunk that sums
// them. Pieces of no bytes are not sent. `peers`: the NCCL rank of each position (nullptr: the position).
inline void send_recv_pieces(Direction direction, const layout::Geometry* geom, int32_t n,
                             const layout::PackedWorkspace& ws, std::byte* send, std::byte* recv, const int32_t* peers,
                             ncclComm_t comm, cudaStream_t s) {
  const bool scatter = direction == Direction::kScatter;
  for (int32_t t = 0; t < n; ++t) {
    const layout::Geometry& g = geom[t];
    for (int64_t j = 0; j < g.k; ++j) {
      // The pieces' sequence and head positions: out goes to j, in comes from j.
      const int64_t out_s = scatter ? g.me : j;
      const int64_t out_h = scatter ? j : g.me;
      const int64_t out = g.moved_bytes(out_s, out_h);
      const int64_t in = g.moved_bytes(out_h, out_s);
      const int peer = peers != nullptr ? peers[j] : static_cast<int>(j);
      if (out > 0) {
        BASP_NCCL_CHECK(ncclSend(send + ws.chunk_offset(t, j) + g.moved_offset(out_s, out_h), static_cast<size_t>(out),
                                 ncclUint8, peer, comm, s));
      }
      if (in > 0) {
        BASP_NCCL_CHECK(ncclRecv(recv + ws.chunk_offset(t, j) + g.moved_offset(out_h, out_s), static_cast<size_t>(in),
                                 ncclUint8, peer, comm, s));
      }
    }
  }
}

// ncclGroupStart/End around `calls`, closing the group when a call inside it fails.
template <typename Calls>
void nccl_group(Calls&& calls) {
  BASP_NCCL_CHECK(ncclGroupStart());
  struct GroupEnd {
    bool open = true;
    ~GroupEnd() {
      if (open) ncclGroupEnd();
    }
  } group_end;
  calls();
  group_end.open = false;
  BASP_NCCL_CHECK(ncclGroupEnd());
}

class DevicePath {
 public:
  virtual ~DevicePath() = default;
  virtual basp_path_t id() const = 0;
  virtual int64_t workspace_bytes() const { return 0; }
  virtual void scatter(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t comm,
                       cudaStream_t s) = 0;
  virtual void gather(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t comm,
                      cudaStream_t s) = 0;
};

class LocalCopyPath final : public DevicePath {
 public:
  explicit LocalCopyPath(const plan::ExchangePlan& plan) : plan_(plan) {}
  basp_path_t id() const override { return BASP_PATH_LOCAL; }
  void scatter(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t,
               cudaStream_t s) override {
    copy(call, inputs, outputs, s);
  }
  void gather(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t,
              cudaStream_t s) override {
    copy(call, inputs, outputs, s);
  }

 private:
  // A head chunk copies its moved heads of every row (Geometry::moved), one 2D copy per tensor.
  void copy(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, cudaStream_t s) {
    for (int32_t t = 0; t < plan_.num_tensors(); ++t) {
      const layout::Geometry& g = call.at(t);
      if (!g.whole()) {
        const layout::HeadSpan m = g.moved(0);
        const auto width = static_cast<size_t>(m.size() * g.dim_bytes());
        const auto rows = static_cast<size_t>(g.seq_rows(0));
        if (width == 0 || rows == 0) continue;
        const auto pitch = static_cast<size_t>(g.seq_row_bytes());
        const auto skip = static_cast<size_t>(m.begin * g.dim_bytes());
        BASP_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<std::byte*>(outputs[t]) + skip, pitch,
                                          static_cast<const std::byte*>(inputs[t]) + skip, pitch, width, rows,
                                          cudaMemcpyDeviceToDevice, s));
        continue;
      }
      const auto bytes = static_cast<size_t>(g.seq_tensor_bytes(0));
      if (bytes == 0) continue;
      BASP_CUDA_CHECK(cudaMemcpyAsync(outputs[t], inputs[t], bytes, cudaMemcpyDeviceToDevice, s));
    }
  }
  const plan::ExchangePlan& plan_;
};

class AllToAllPath final : public DevicePath {
 public:
  AllToAllPath(const plan::ExchangePlan& plan, int device)
      : plan_(plan), workspace_(layout::make_packed_workspace(plan.tensors.data(), plan.num_tensors())) {
    DeviceScope scope(device);
    check_launch(layout::cuda::prepare_row_copy(), "preparing the pack/unpack kernel");
    send_ = DeviceBuffer(workspace_.bytes());
    recv_ = DeviceBuffer(workspace_.bytes());
  }
  basp_path_t id() const override { return BASP_PATH_NCCL; }
  int64_t workspace_bytes() const override { return send_.bytes() + recv_.bytes(); }

  void scatter(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t comm,
               cudaStream_t s) override {
    const int32_t n = plan_.num_tensors();
    const layout::Geometry* g = geometry(call);
    {
      const detail::TraceRange range("basp:pack");
      check_launch(layout::cuda::launch_scatter_pack(g, n, workspace_, inputs, send_.get(), s), "scatter: pack");
    }
    {
      const detail::TraceRange range("basp:exchange");
      exchange(Direction::kScatter, call, comm, s);
    }
    const detail::TraceRange range("basp:unpack");
    check_launch(layout::cuda::launch_scatter_unpack(g, n, workspace_, recv_.get(), outputs, s), "scatter: unpack");
  }

  void gather(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t comm,
              cudaStream_t s) override {
    const int32_t n = plan_.num_tensors();
    const layout::Geometry* g = geometry(call);
    {
      const detail::TraceRange range("basp:pack");
      check_launch(layout::cuda::launch_gather_pack(g, n, workspace_, inputs, send_.get(), s), "gather: pack");
    }
    {
      const detail::TraceRange range("basp:exchange");
      exchange(Direction::kGather, call, comm, s);
    }
    const detail::TraceRange range("basp:unpack");
    check_launch(layout::cuda::launch_gather_unpack(g, n, workspace_, recv_.get(), outputs, s), "gather: unpack");
  }

 private:
  // The whole exchange at the plan's shape; a head chunk's geometry carries the heads it moves.
  const layout::Geometry* geometry(const plan::CallGeometry& call) const {
    return call.chunk.whole() ? plan_.tensors.data() : call.tensors.data();
  }
  // Every peer block has the same size: one all-to-all moves every tensor. A head chunk's pieces lie inside the
  // blocks (send_recv_pieces).
  void exchange(Direction direction, const plan::CallGeometry& call, ncclComm_t comm, cudaStream_t s) {
    if (call.chunk.whole()) {
      alltoall_bytes(send_.get(), recv_.get(), static_cast<size_t>(workspace_.peer_stride[0]), comm, s);
      return;
    }
    nccl_group([&] {
      send_recv_pieces(direction, call.tensors.data(), call.num_tensors, workspace_, send_.get(), recv_.get(), nullptr,
                       comm, s);
    });
  }

  const plan::ExchangePlan& plan_;
  layout::PackedWorkspace workspace_;
  DeviceBuffer send_;
  DeviceBuffer recv_;
};

// How a batch plan's exchange differs from an ordinary one (nccl_batch.h): its peers are world ranks on the world
// communicator, its workspaces are the comm's pool, and a tag goes to every peer ahead of the data.
struct BatchWiring {
  std::vector<int32_t> peers;                 // the NCCL rank of each position
  std::byte* pool = nullptr;                  // PoolCarve::total bytes of the comm's pool
  layout::cuda::TagReport* report = nullptr;  // device view of the comm's report
  layout::cuda::ExchangeTag tag;              // this plan's (its call set per execute)
};

// Where a batch plan's pieces lie in its pool memory, for slotted workspaces of `workspace` bytes each: the send
// and receive workspaces (each rounded up to 256 bytes), the unpacks' guard word, the outgoing tag, and a tag slot
// per position.
struct PoolCarve {
  int64_t workspace = 0;  // offset of the receive workspace (the send one is at 0)
  int64_t skip = 0;
  int64_t tag_out = 0;
  int64_t tags_in = 0;
  int64_t total = 0;
};

inline PoolCarve carve_pool(int64_t workspace, int64_t group_size) {
  PoolCarve c;
  c.workspace = (std::max<int64_t>(workspace, 16) + 255) / 256 * 256;
  c.skip = 2 * c.workspace;
  c.tag_out = c.skip + 256;
  c.tags_in = c.tag_out + 256;
  c.total = c.tags_in + static_cast<int64_t>(sizeof(layout::cuda::ExchangeTag)) * group_size;
  return c;
}

// Any shape (docs/gpu.md): the chunks of every (tensor, peer) pair have their own sizes, so they travel as grouped
// ncclSend/ncclRecv between the slotted send and receive workspaces (layout/packed_workspace.h), sized at the
// plan's capacity; every launch and every NCCL call takes its counts from the call's geometry, so an execute of a
// fixed T can be captured in a CUDA graph. A tensor whose heads are replicated is unpacked by the summing kernel.
// A batch plan's (`wiring` set) also sends its tag to every peer first, and checks the tags that arrived before
// the unpacks, which write nothing when one is wrong.
class GeneralPath final : public DevicePath {
 public:
  GeneralPath(const plan::ExchangePlan& plan, int device, const BatchWiring* wiring = nullptr)
      : plan_(plan), workspace_(workspace_of(plan)) {
    DeviceScope scope(device);
    check_launch(layout::cuda::prepare_row_copy(), "preparing the pack/unpack kernel");
    if (wiring != nullptr) {
      wiring_ = *wiring;
      const PoolCarve c = carve_pool(workspace_.bytes(), plan_.group_size);
      send_ptr_ = wiring_.pool;
      recv_ptr_ = wiring_.pool + c.workspace;
      skip_ = reinterpret_cast<uint32_t*>(wiring_.pool + c.skip);
      tag_out_ = reinterpret_cast<layout::cuda::ExchangeTag*>(wiring_.pool + c.tag_out);
      tags_in_ = reinterpret_cast<layout::cuda::ExchangeTag*>(wiring_.pool + c.tags_in);
      return;
    }
    send_ = DeviceBuffer(std::max<int64_t>(workspace_.bytes(), 16));
    recv_ = DeviceBuffer(std::max<int64_t>(workspace_.bytes(), 16));
    send_ptr_ = send_.get();
    recv_ptr_ = recv_.get();
  }
  // The pool bytes a batch plan's path takes (BatchWiring::pool).
  static int64_t pool_bytes(const plan::ExchangePlan& plan) {
    return carve_pool(workspace_of(plan).bytes(), plan.group_size).total;
  }
  basp_path_t id() const override { return BASP_PATH_NCCL; }
  int64_t workspace_bytes() const override {
    return wiring_.pool != nullptr ? pool_bytes(plan_) : send_.bytes() + recv_.bytes();
  }

  void scatter(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t comm,
               cudaStream_t s) override {
    const int32_t n = call.num_tensors;
    const layout::Geometry* geom = call.tensors.data();
    {
      const detail::TraceRange range("basp:pack");
      check_launch(layout::cuda::launch_scatter_pack(geom, n, workspace_, inputs, send_ptr_, s), "scatter: pack");
    }
    {
      const detail::TraceRange range("basp:exchange");
      exchange(Direction::kScatter, geom, n, comm, s);
    }
    const detail::TraceRange range("basp:unpack");
    check_launch(layout::cuda::launch_scatter_unpack(geom, n, workspace_, recv_ptr_, outputs, s, skip_),
                 "scatter: unpack");
  }

  void gather(const plan::CallGeometry& call, const void* const* inputs, void* const* outputs, ncclComm_t comm,
              cudaStream_t s) override {
    const int32_t n = call.num_tensors;
    const layout::Geometry* geom = call.tensors.data();
    {
      const detail::TraceRange range("basp:pack");
      check_launch(layout::cuda::launch_gather_pack(geom, n, workspace_, inputs, send_ptr_, s), "gather: pack");
    }
    {
      const detail::TraceRange range("basp:exchange");
      exchange(Direction::kGather, geom, n, comm, s);
    }
    const detail::TraceRange range("basp:unpack");
    // Tensors without replicated heads in one row-copy launch (a replicated one gets no rows there), then the
    // summing unpack of each replicated one.
    layout::Geometry plain[BASP_MAX_TENSORS];
    void* plain_out[BASP_MAX_TENSORS] = {};
    for (int32_t t = 0; t < n; ++t) {
      plain[t] = geom[t];
      if (geom[t].replicated()) {
        plain[t].b_loc = 0;
      } else {
        plain_out[t] = outputs[t];
      }
    }
    check_launch(layout::cuda::launch_gather_unpack(plain, n, workspace_, recv_ptr_, plain_out, s, skip_),
                 "gather: unpack");
    for (int32_t t = 0; t < n; ++t) {
      if (!geom[t].replicated()) continue;
      layout::SumUnpackArgs a;
      a.geom = geom[t];
      a.tensor = t;
      a.dtype = plan_.spec.dtype;
      a.seq = static_cast<unsigned char*>(outputs[t]);
      a.wire = reinterpret_cast<const unsigned char*>(recv_ptr_);
      a.workspace = workspace_;
      a.skip = skip_;
      check_launch(layout::cuda::launch_sum_unpack(a, s), "gather: summing unpack");
    }
  }

 private:
  // Scatter: this rank's rows of peer j's heads go out, peer j's rows of this rank's heads come in; a gather the
  // other way round. Chunks of no bytes are not sent. A batch plan's tag goes to every peer first (NCCL matches
  // a pair's messages in order), so every pair of the group exchanges at least the tag.
  void exchange(Direction direction, const layout::Geometry* geom, int32_t n, ncclComm_t comm, cudaStream_t s) {
    const int64_t k = plan_.group_size;
    const int64_t me = plan_.position;
    const bool tagged = tag_out_ != nullptr;
    if (tagged) check_launch(layout::cuda::launch_write_tag(tag_out_, wiring_.tag, s), "writing the tag");
    nccl_group([&] {
      if (tagged) {
        for (int64_t j = 0; j < k; ++j) {
          if (j == me) continue;
          const int peer = peer_of(j);
          BASP_NCCL_CHECK(ncclSend(tag_out_, sizeof(layout::cuda::ExchangeTag), ncclUint8, peer, comm, s));
          BASP_NCCL_CHECK(ncclRecv(tags_in_ + j, sizeof(layout::cuda::ExchangeTag), ncclUint8, peer, comm, s));
        }
      }
      send_recv_pieces(direction, geom, n, workspace_, send_ptr_, recv_ptr_,
                       wiring_.peers.empty() ? nullptr : wiring_.peers.data(), comm, s);
    });
    if (tagged) {
      check_launch(layout::cuda::launch_check_tags(tags_in_, static_cast<int32_t>(k), static_cast<int32_t>(me),
                                                   wiring_.tag, skip_, wiring_.report, s),
                   "checking the tags");
    }
  }

 public:
  // A batch plan's tag for the next execute (BatchWiring::tag).
  void set_tag(const layout::cuda::ExchangeTag& tag) { wiring_.tag = tag; }

 private:
  static layout::PackedWorkspace workspace_of(const plan::ExchangePlan& plan) {
    return layout::make_slotted_workspace(plan.tensors.data(), plan.num_tensors());
  }

  int peer_of(int64_t position) const {
    return wiring_.peers.empty() ? static_cast<int>(position) : wiring_.peers[static_cast<size_t>(position)];
  }

  const plan::ExchangePlan& plan_;
  layout::PackedWorkspace workspace_;
  DeviceBuffer send_;
  DeviceBuffer recv_;
  BatchWiring wiring_;
  std::byte* send_ptr_ = nullptr;
  std::byte* recv_ptr_ = nullptr;
  // A batch plan's, in its pool memory (carve_pool); nullptr otherwise.
  uint32_t* skip_ = nullptr;
  layout::cuda::ExchangeTag* tag_out_ = nullptr;
  layout::cuda::ExchangeTag* tags_in_ = nullptr;
};

}  // namespace basp::transport::nccl::paths
