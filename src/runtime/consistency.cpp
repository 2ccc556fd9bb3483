#include "runtime/consistency.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/error.h"
#include "common/fnv.h"
#include "common/rank_list.h"
#include "common/status_name.h"

namespace basp::runtime {
namespace {

enum class Shown { kNumber, kLayout, kDtype, kBackend, kPlacement, kHash, kNullPointer };

struct FieldInfo {
  const char* name;
  Shown shown;
};

constexpr FieldInfo kCommFields[] = {
    {"micro_batch", Shown::kNumber},  {"num_groups", Shown::kNumber}, {"backend", Shown::kBackend},
    {"placement", Shown::kPlacement}, {"reserved0", Shown::kNumber},  {"batch_capacity", Shown::kNumber},
};

constexpr FieldInfo kPlanFields[] = {
    {"layout", Shown::kLayout},
    {"dtype", Shown::kDtype},
    {"seq_len", Shown::kNumber},
    {"head_dim", Shown::kNumber},
    {"num_tensors", Shown::kNumber},
    {"reserved0", Shown::kNumber},
    {"num_heads[0]", Shown::kNumber},
    {"num_heads[1]", Shown::kNumber},
    {"num_heads[2]", Shown::kNumber},
    {"num_heads[3]", Shown::kNumber},
    {"num_heads[4]", Shown::kNumber},
    {"num_heads[5]", Shown::kNumber},
    {"num_heads[6]", Shown::kNumber},
    {"num_heads[7]", Shown::kNumber},
    {"comm micro_batch", Shown::kNumber},
    {"comm num_groups", Shown::kNumber},
    {"comm placement", Shown::kPlacement},
    {"comm group membership (hash)", Shown::kHash},
    {"query_heads[0]", Shown::kNumber},
    {"query_heads[1]", Shown::kNumber},
    {"query_heads[2]", Shown::kNumber},
    {"query_heads[3]", Shown::kNumber},
    {"query_heads[4]", Shown::kNumber},
    {"query_heads[5]", Shown::kNumber},
    {"query_heads[6]", Shown::kNumber},
    {"query_heads[7]", Shown::kNumber},
    {"token_capacity", Shown::kNumber},
    {"head_dims[0]", Shown::kNumber},
    {"head_dims[1]", Shown::kNumber},
    {"head_dims[2]", Shown::kNumber},
    {"head_dims[3]", Shown::kNumber},
    {"head_dims[4]", Shown::kNumber},
    {"head_dims[5]", Shown::kNumber},
    {"head_dims[6]", Shown::kNumber},
    {"head_dims[7]", Shown::kNumber},
};
static_assert(BASP_MAX_TENSORS == 8, "kPlanFields lists num_heads, query_heads and head_dims [0..7]");
static_assert(sizeof(kPlanFields) / sizeof(FieldInfo) <= CallRecord::kMaxFields, "too many plan fields");

constexpr FieldInfo kMemFreeFields[] = {{"ptr", Shown::kNullPointer}};

// At most this many distinct values are listed per field; more are counted.
constexpr size_t kMaxValuesShown = 8;

const FieldInfo* fields_of(int64_t kind, int64_t* count) {
  switch (static_cast<CallKind>(kind)) {
    case CallKind::kCommCreateMpi:
    case CallKind::kCommCreateNccl:
    case CallKind::kCommCreateOob: *count = std::size(kCommFields); return kCommFields;
    case CallKind::kPlanCreate: *count = std::size(kPlanFields); return kPlanFields;
    case CallKind::kMemFree: *count = std::size(kMemFreeFields); return kMemFreeFields;
    default: *count = 0; return nullptr;
  }
}

const char* enum_name(Shown shown, int64_t v) {
  switch (shown) {
    case Shown::kLayout:
      if (v == BASP_LAYOUT_BSHD) return "BASP_LAYOUT_BSHD";
      if (v == BASP_LAYOUT_SBHD) return "BASP_LAYOUT_SBHD";
      break;
    case Shown::kDtype: {
      static constexpr const char* kNames[] = {
          "BASP_DTYPE_BYTE", "BASP_DTYPE_FP8_E4M3", "BASP_DTYPE_FP8_E5M2", "BASP_DTYPE_FP16",  "BASP_DTYPE_BF16",
          "BASP_DTYPE_FP32", "BASP_DTYPE_FP64",     "BASP_DTYPE_INT32",    "BASP_DTYPE_INT64", "BASP_DTYPE_UNSET"};
      static_assert(std::size(kNames) == BASP_DTYPE_COUNT, "a dtype without a name");
      if (v >= 0 && v < BASP_DTYPE_COUNT) return kNames[v];
      break;
    }
    case Shown::kBackend:
      if (v == BASP_BACKEND_MPI) return "BASP_BACKEND_MPI";
      if (v == BASP_BACKEND_NCCL) return "BASP_BACKEND_NCCL";
      break;
    case Shown::kPlacement:
      if (v == BASP_PLACEMENT_DEFAULT) return "BASP_PLACEMENT_DEFAULT";
      if (v == BASP_PLACEMENT_CONTIGUOUS) return "BASP_PLACEMENT_CONTIGUOUS";
      if (v == BASP_PLACEMENT_TOPOLOGY) return "BASP_PLACEMENT_TOPOLOGY";
      break;
    default: break;
  }
  return nullptr;
}

std::string show(Shown shown, int64_t v) {
  if (shown == Shown::kHash) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
    return buf;
  }
  if (shown == Shown::kNullPointer) return v ? "NULL" : "a pointer";
  const char* name = enum_name(shown, v);
  return name ? name : std::to_string(v);
}

// One clause: "name: rank 0..2 = a, rank 3 = b" over the ranks in `who` (indices into records/members).
template <typename ValueOf>
std::string clause(const char* name, const std::vector<size_t>& who, const std::vector<int32_t>& members,
                   ValueOf value_of) {
  std::vector<std::pair<std::string, std::vector<int32_t>>> groups;  // in order of first appearance
  for (size_t i : who) {
    const std::string v = value_of(i);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {members[i]}});
    } else {
      it->second.push_back(members[i]);
    }
  }
  if (groups.size() < 2) return {};
  std::string out = std::string(name) + ":";
  for (size_t g = 0; g < groups.size() && g < kMaxValuesShown; ++g) {
    out += (g == 0 ? " rank " : ", rank ") + detail::compress_ranks(groups[g].second) + " = " + groups[g].first;
  }
  if (groups.size() > kMaxValuesShown) {
    out += " and " + std::to_string(groups.size() - kMaxValuesShown) + " more values";
  }
  return out;
}

void append(std::string& out, const std::string& part) {
  if (part.empty()) return;
  if (!out.empty()) out += "; ";
  out += part;
}

uint64_t hash_layout(const plan::GroupLayout& layout) {
  detail::Fnv1a h;
  for (const auto& members : layout.members) {
    h.add(static_cast<int64_t>(members.size()));
    for (int32_t r : members) h.add(r);
  }
  return h.value();
}

}  // namespace

const char* call_name(CallKind kind) {
  switch (kind) {
    case CallKind::kCommCreateMpi: return "basp_comm_create_mpi";
    case CallKind::kCommCreateNccl: return "basp_comm_create_nccl";
    case CallKind::kCommCreateOob: return "basp_comm_create_oob";
    case CallKind::kPlanCreate: return "basp_plan_create";
    case CallKind::kMemAlloc: return "basp_mem_alloc";
    case CallKind::kMemFree: return "basp_mem_free";
  }
  return "an unknown call";
}

bool is_comm_create(CallKind kind) {
  return kind == CallKind::kCommCreateMpi || kind == CallKind::kCommCreateNccl || kind == CallKind::kCommCreateOob;
}

CallRecord describe_comm_create(CallKind kind, const basp_comm_config_v1* config, basp_status_t local_status) {
  CallRecord r;
  r.kind = static_cast<int64_t>(kind);
  r.local_status = local_status;
  r.num_fields = std::size(kCommFields);
  if (config == nullptr) return r;
  r.readable = 1;
  const int64_t values[] = {config->micro_batch, config->num_groups, config->backend,
                            config->placement,   config->reserved0,  config->batch_capacity};
  static_assert(std::size(values) == std::size(kCommFields), "kCommFields and the values disagree");
  std::copy(std::begin(values), std::end(values), r.fields);
  return r;
}

CallRecord describe_plan_create(const basp_plan_desc_v1* desc, basp_status_t local_status,
                                const plan::GroupLayout& layout, basp_placement_t placement) {
  CallRecord r;
  r.kind = static_cast<int64_t>(CallKind::kPlanCreate);
  r.local_status = local_status;
  r.num_fields = std::size(kPlanFields);
  // The comm's fields are known even when the descriptor is not.
  r.fields[14] = layout.micro_batch;
  r.fields[15] = layout.num_groups;
  r.fields[16] = placement;
  r.fields[17] = static_cast<int64_t>(hash_layout(layout));
  if (desc == nullptr) return r;
  r.readable = 1;
  r.fields[0] = desc->layout;
  r.fields[1] = desc->dtype;
  r.fields[2] = desc->seq_len;
  r.fields[3] = desc->head_dim;
  r.fields[4] = desc->num_tensors;
  r.fields[5] = desc->reserved0;
  for (int t = 0; t < BASP_MAX_TENSORS; ++t) r.fields[6 + t] = desc->num_heads[t];
  for (int t = 0; t < BASP_MAX_TENSORS; ++t) r.fields[18 + t] = desc->query_heads[t];
  r.fields[26] = desc->token_capacity;
  for (int t = 0; t < BASP_MAX_TENSORS; ++t) r.fields[27 + t] = desc->head_dims[t];
  return r;
}

CallRecord describe_call(CallKind kind, basp_status_t local_status) {
  CallRecord r;
  r.kind = static_cast<int64_t>(kind);
  r.local_status = local_status;
  r.readable = 1;
  return r;
}

CallRecord describe_mem_free(bool null_pointer) {
  CallRecord r = describe_call(CallKind::kMemFree, BASP_SUCCESS);
  r.num_fields = std::size(kMemFreeFields);
  r.fields[0] = null_pointer ? 1 : 0;
  return r;
}

uint64_t fingerprint(const CallRecord& record) {
  // FNV-1a over the record's words: the same record gives the same value on every rank and every platform of
  // one job (the words are integers, not padding).
  detail::Fnv1a h;
  h.add(record.kind);
  h.add(record.local_status);
  h.add(record.readable);
  h.add(record.num_fields);
  for (int64_t f : record.fields) h.add(f);
  return h.value();
}

std::string describe_mismatch(const std::vector<CallRecord>& records, const std::vector<int32_t>& members) {
  std::vector<size_t> all(records.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::string out;
  // Different calls: nothing else is comparable.
  append(out, clause("call", all, members,
                     [&](size_t i) { return std::string(call_name(static_cast<CallKind>(records[i].kind))); }));
  if (!out.empty()) return out;
  append(out, clause("argument checks", all, members, [&](size_t i) {
           return records[i].local_status == BASP_SUCCESS
                      ? std::string("passed")
                      : std::string("failed with ") + detail::status_name(static_cast<int>(records[i].local_status));
         }));
  int64_t count = 0;
  const FieldInfo* fields = records.empty() ? nullptr : fields_of(records[0].kind, &count);
  std::vector<size_t> readable;
  for (size_t i : all) {
    if (records[i].readable) readable.push_back(i);
  }
  for (int64_t f = 0; f < count; ++f) {
    // Fields that do not come from the caller's struct (the comm's, in plan records) compare over every rank.
    const bool from_struct = !(records[0].kind == static_cast<int64_t>(CallKind::kPlanCreate) && f >= 14);
    append(out, clause(fields[f].name, from_struct ? readable : all, members,
                       [&](size_t i) { return show(fields[f].shown, records[i].fields[f]); }));
  }
  return out;
}

void fail_mismatch(const std::vector<CallRecord>& records, const std::vector<int32_t>& members,
                   const std::string& where, const CallRecord& mine) {
  const char* call = call_name(static_cast<CallKind>(mine.kind));
  std::string detail = describe_mismatch(records, members);
  if (detail.empty()) detail = "the fingerprints differ but the records read the same (please report)";
  bool same_call = true;
  for (const auto& r : records) same_call = same_call && r.kind == mine.kind;
  detail::fail(BASP_ERROR_MISMATCH, "the ranks of ", where,
               same_call ? std::string(" called ") + call + " with different arguments: "
                         : std::string(" are not in the same collective call: "),
               detail);
}

void agree_by_allgather(const AllGatherBytes& allgather, int32_t size, const std::vector<int32_t>& members,
                        const std::string& where, const CallRecord& mine, OthersChecks* others) {
  const std::string call = call_name(static_cast<CallKind>(mine.kind));
  const uint64_t fp = fingerprint(mine);
  std::vector<uint64_t> all_fp(static_cast<size_t>(size));
  allgather(&fp, sizeof(fp), all_fp.data(), "the consistency check of " + call + " (every rank must call it)");
  if (!std::all_of(all_fp.begin(), all_fp.end(), [fp](uint64_t v) { return v == fp; })) {
    std::vector<CallRecord> records(static_cast<size_t>(size));
    allgather(&mine, sizeof(CallRecord), records.data(), "the gather of the ranks' arguments of " + call);
    if (others) {
      // Whether every other rank's own checks ended with `status` (the records hold this rank's too).
      const auto others_all = [&](int64_t status) {
        const auto n = std::count_if(records.begin(), records.end(),
                                     [&](const CallRecord& r) { return r.local_status == status; });
        return n == size - (mine.local_status == status ? 0 : 1);
      };
      *others = others_all(BASP_SUCCESS)                                             ? OthersChecks::kPassed
                : mine.local_status != BASP_SUCCESS && others_all(mine.local_status) ? OthersChecks::kFailedAlike
                                                                                     : OthersChecks::kMixed;
    }
    fail_mismatch(records, members, where, mine);
  }
  if (mine.local_status != BASP_SUCCESS) return;  // every rank failed its own checks alike: none goes on
  allgather(&fp, sizeof(fp), all_fp.data(), "the second round of the consistency check of " + call);
}

void agree(transport::Bootstrap& bootstrap, const CallRecord& mine, const std::exception_ptr& local_error,
           const detail::Deadline& deadline) {
  OthersChecks others = OthersChecks::kPassed;
  try {
    agree_by_allgather([&](const void* send, size_t bytes, void* recv,
                           const std::string& step) { bootstrap.allgather(send, bytes, recv, step, deadline); },
                       bootstrap.size(), bootstrap.members(), bootstrap.where(), mine, &others);
  } catch (const detail::Error& e) {
    if (!local_error || e.status() != BASP_ERROR_MISMATCH) throw;
    // This rank's own error explains the mismatch best; say what the other ranks see.
    try {
      std::rethrow_exception(local_error);
    } catch (const detail::Error& own) {
      const char* note =
          others == OthersChecks::kPassed        ? " (the other ranks of the call fail with BASP_ERROR_MISMATCH: "
          : others == OthersChecks::kFailedAlike ? " (every rank of the call failed so; the calls differ besides: "
                                                 : " (the other ranks of the call fail too: ";
      detail::fail(own.status(), own.what(), note, e.what(), ")");
    }
  }
  if (local_error) std::rethrow_exception(local_error);
}

}  // namespace basp::runtime
