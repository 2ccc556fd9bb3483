// The C ABI of the documents-to-groups assignment (basp.h, "Packed batches: documents to groups"): marshalling
// only, as in capi.cpp. Every check runs before the first byte of output is written, so a failed call leaves the
// caller's struct and arrays as they were.
#include <algorithm>
#include <cstdint>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/error.h"
#include "plan/documents.h"
#include "plan/groups.h"

namespace {

basp_doc_assignment_v1 to_struct(const basp::plan::DocumentAssignment& a) {
  basp_doc_assignment_v1 out = BASP_DOC_ASSIGNMENT_INITIALIZER;
  out.rank = a.rank;
  out.group_index = a.group_index;
  out.group_position = a.group_position;
  out.group_size = a.group_size;
  out.num_docs = static_cast<int32_t>(a.docs.size());
  out.stream_tokens = a.stream_tokens;
  out.token_begin = a.token_begin;
  out.token_end = a.token_end;
  out.first_doc = a.first_doc;
  out.first_doc_offset = a.first_doc_offset;
  out.max_seqlen = a.max_seqlen;
  out.max_group_tokens = a.max_group_tokens;
  out.imbalance = a.imbalance;
  return out;
}

}  // namespace

using basp::capi::guarded;

extern "C" {

basp_status_t basp_comm_assign_documents(basp_comm_t comm, const int64_t* lengths, int32_t num_docs, int64_t capacity,
                                         int32_t rank, basp_doc_assignment_t* assignment, int32_t* docs,
                                         int64_t* cu_seqlens, int32_t max_docs) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    c->check_usable();
    basp::capi::check_out_struct(assignment, BASP_DOC_ASSIGNMENT_MAGIC, sizeof(basp_doc_assignment_v1), "assignment");
    BASP_CHECK(lengths != nullptr || num_docs <= 0, BASP_ERROR_NULL_POINTER, "lengths is NULL but num_docs is ",
               num_docs, " (NULL is allowed only when num_docs is 0)");
    const basp::plan::DocumentAssignment a = c->assign_documents(lengths, num_docs, capacity, rank);
    const auto need = static_cast<int32_t>(a.docs.size());
    if (docs != nullptr || cu_seqlens != nullptr) {
      BASP_CHECK_ARG(max_docs >= need, "max_docs (", max_docs, ") is smaller than the ", need, " documents of ",
                     basp::plan::describe_group(c->layout(), a.group_index), ": docs needs ", need,
                     " entries and cu_seqlens ", need + 1);
    }
    if (docs != nullptr) std::copy(a.docs.begin(), a.docs.end(), docs);
    if (cu_seqlens != nullptr) std::copy(a.cu_seqlens.begin(), a.cu_seqlens.end(), cu_seqlens);
    basp::capi::write_out_struct(assignment, to_struct(a));
  });
}

}  // extern "C"
