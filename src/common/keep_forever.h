// Memory that an abandoned operation may still read or write: an MPI collective or a send that timed out and
// could not be cancelled, an out-of-band all-gather that never completed. It is kept for the life of the process
// in one registry, so it is never freed under the operation's feet, and it stays reachable, so a leak checker
// does not report it as lost.
#pragma once

#include <memory>

namespace basp::detail {

void keep_forever(std::shared_ptr<void> memory);

}  // namespace basp::detail
