// Reading an untrusted hwloc XML file without trusting hwloc's parser (docs/reliability.md). The fuzzer found
// files that crash hwloc 2.9's XML import itself (lstopo --input segfaults on them too), so load_xml parses the
// file in a child process first: the child loads it with hwloc and exports the result back as hwloc XML, which
// the caller then loads in-process. A file that crashes or hangs hwloc fails with BASP_ERROR_INVALID_ARGUMENT
// naming it, instead of taking the process down.
#pragma once

#include <string>

namespace basp::topology {

// The file's topology as hwloc re-exports it (XML v2), read in a child process with every I/O object kept.
// Throws BASP_ERROR_INVALID_ARGUMENT naming `path` when hwloc rejects the file, crashes on it or takes longer
// than `timeout_s`.
std::string sandboxed_hwloc_xml(const std::string& path, int timeout_s = 10);

}  // namespace basp::topology
