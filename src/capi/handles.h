// What the opaque C handles point to, and the registry that lets every entry point reject a handle that is
// NULL, already destroyed or never was one, without dereferencing it. Entry points take a shared reference to
// the object under the registry lock, so destroying a handle on one thread while another thread uses it
// never frees memory that is still in use.
#pragma once

#include <memory>

#include "runtime/comm.h"
#include "runtime/plan.h"

struct basp_comm {
  std::shared_ptr<basp::runtime::Comm> impl;
};

struct basp_plan {
  std::shared_ptr<basp::runtime::Plan> impl;
};

namespace basp::capi {

void register_comm(const basp_comm* comm);
void register_plan(const basp_plan* plan);

// Removes a live handle of that kind from the registry (the caller then deletes it), or throws
// BASP_ERROR_INVALID_HANDLE naming `name`.
void unregister_comm(basp_comm_t handle, const char* name);
void unregister_plan(basp_plan_t handle, const char* name);

// The object behind a live handle, or a BASP_ERROR_INVALID_HANDLE error naming `name`.
std::shared_ptr<runtime::Comm> comm_ref(basp_comm_t handle, const char* name);
std::shared_ptr<runtime::Plan> plan_ref(basp_plan_t handle, const char* name);

}  // namespace basp::capi
