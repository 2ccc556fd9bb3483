// basp_comm_calibrate (docs/batch.md): the exchange cost model measured on the live comm, with groups running
// concurrently as batch plans, fitted from timings every rank gathers, so that every rank stores the same model.
// The timing loop only: which memberships, their bytes and the fit are plan/calibration.h's.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/comm.h"

namespace basp::runtime {

// Collective over the comm's world. max_bytes: per rank and exchange (0: 4 MiB); repeats per size (0: 5).
void calibrate(const std::shared_ptr<Comm>& comm, int64_t max_bytes, int32_t repeats);

}  // namespace basp::runtime
