#include "common/keep_forever.h"

#include <mutex>
#include <utility>
#include <vector>

namespace basp::detail {

void keep_forever(std::shared_ptr<void> memory) {
  static auto* mutex = new std::mutex();                         // never destroyed: usable at exit
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // idem
  std::lock_guard<std::mutex> lock(*mutex);
  kept->push_back(std::move(memory));
}

}  // namespace basp::detail
