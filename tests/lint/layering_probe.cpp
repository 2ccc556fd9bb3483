// Compiled only by tests/lint/test_layering.sh, against the transport's include root (src/CMakeLists.txt): as is it
// must compile; with BASP_LAYERING_VIOLATION, which includes a runtime header as a transport source might by
// mistake, it must not.
#include "transport/transport.h"
#ifdef BASP_LAYERING_VIOLATION
#include "runtime/comm.h"
#endif

int basp_layering_probe() { return static_cast<int>(sizeof(basp::transport::GroupSpec)); }
