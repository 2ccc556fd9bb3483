#include "capi/handles.h"

#include <mutex>
#include <unordered_map>

#include "common/error.h"

namespace basp::capi {
namespace {

enum class Kind { kComm, kPlan };

const char* kind_name(Kind k) { return k == Kind::kComm ? "basp_comm_t" : "basp_plan_t"; }

std::mutex& registry_mutex() {
  static auto* m = new std::mutex();  // never destroyed: usable from atexit handlers
  return *m;
}

std::unordered_map<const void*, Kind>& registry() {
  static auto* r = new std::unordered_map<const void*, Kind>();
  return *r;
}

void check_live(const void* h, Kind kind, const char* name) {
  BASP_CHECK(h != nullptr, BASP_ERROR_INVALID_HANDLE, name, " is NULL");
  auto it = registry().find(h);
  BASP_CHECK(it != registry().end() && it->second == kind, BASP_ERROR_INVALID_HANDLE, name, " (", h, ") is not a live ",
             kind_name(kind), " (already destroyed, or not a ", kind_name(kind), ")");
}

}  // namespace

void register_comm(const basp_comm* comm) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[comm] = Kind::kComm;
}

void register_plan(const basp_plan* plan) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[plan] = Kind::kPlan;
}

void unregister_comm(basp_comm_t handle, const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  check_live(handle, Kind::kComm, name);
  registry().erase(handle);
}

void unregister_plan(basp_plan_t handle, const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  check_live(handle, Kind::kPlan, name);
  registry().erase(handle);
}

std::shared_ptr<runtime::Comm> comm_ref(basp_comm_t handle, const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  check_live(handle, Kind::kComm, name);
  return handle->impl;
}

std::shared_ptr<runtime::Plan> plan_ref(basp_plan_t handle, const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  check_live(handle, Kind::kPlan, name);
  return handle->impl;
}

}  // namespace basp::capi
