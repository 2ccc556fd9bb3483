#include "topology/xml_sandbox.h"

#include <hwloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "common/error.h"

namespace basp::topology {
namespace {

// The child's whole life: load, export, write, _exit (no atexit handlers, no MPI, no destructors).
[[noreturn]] void child(const std::string& path, int out) {
  // A crash must end the child with its signal, not run the parent's handlers (a sanitizer's, a fuzzer's).
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
  }
  hwloc_topology_t topo = nullptr;
  char* xml = nullptr;
  int len = 0;
  std::string reply;
  if (hwloc_topology_init(&topo) != 0) {
    reply = "E" + std::string("hwloc_topology_init failed");
  } else if (hwloc_topology_set_xml(topo, path.c_str()) != 0) {
    reply = "E" + std::string("hwloc_topology_set_xml failed: ") + std::strerror(errno);
  } else if (hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL), hwloc_topology_load(topo) != 0) {
    reply = "E" + std::string("hwloc_topology_load failed: ") + std::strerror(errno);
  } else if (hwloc_topology_export_xmlbuffer(topo, &xml, &len, 0) != 0 || len <= 0) {
    reply = "E" + std::string("hwloc_topology_export_xmlbuffer failed: ") + std::strerror(errno);
  } else {
    reply = "X" + std::string(xml, static_cast<size_t>(len - 1));  // len counts the final NUL
  }
  size_t done = 0;
  while (done < reply.size()) {
    const ssize_t n = write(out, reply.data() + done, reply.size() - done);
    if (n <= 0) _exit(3);
    done += static_cast<size_t>(n);
  }
  _exit(0);
}

}  // namespace

std::string sandboxed_hwloc_xml(const std::string& path, int timeout_s) {
  int fds[2];
  BASP_CHECK(pipe(fds) == 0, BASP_ERROR_INTERNAL, "pipe failed: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    child(path, fds[1]);
  }
  close(fds[1]);
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    detail::fail(BASP_ERROR_INTERNAL, "fork failed: ", std::strerror(err));
  }
  std::string reply;
  bool timed_out = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    char buf[65536];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  BASP_CHECK_ARG(!timed_out, "topology file \"", path, "\": hwloc did not finish reading it within ", timeout_s, " s");
  BASP_CHECK_ARG(!WIFSIGNALED(status), "topology file \"", path, "\" is not a valid hwloc XML topology: hwloc ",
                 "crashed reading it (signal ", WIFSIGNALED(status) ? WTERMSIG(status) : 0, ")");
  BASP_CHECK_ARG(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !reply.empty(), "topology file \"", path,
                 "\" could not be read (reader exit status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")");
  BASP_CHECK_ARG(reply[0] == 'X', "topology file \"", path, "\" is not a valid hwloc XML topology (", reply.substr(1),
                 ")");
  return reply.substr(1);
}

}  // namespace basp::topology
