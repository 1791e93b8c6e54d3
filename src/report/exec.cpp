// report/exec.cpp: fork + execvp with the child's stdout/stderr redirected to a file (see exec.h).
#include "report/exec.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <thread>

#include "core/interrupt.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

extern char** environ;

namespace tb::report {
namespace {

std::string tail_of(const std::filesystem::path& p, std::size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > n ? s.substr(s.size() - n) : s;
}

}  // namespace

ExecResult exec(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  std::filesystem::path out = log;
  bool temp = false;
  if (out.empty()) {
    char tmpl[] = "/tmp/tb-exec-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) return {127, "cannot create a temporary file"};
    close(fd);
    out = tmpl, temp = true;
  } else if (out.has_parent_path()) {
    std::filesystem::create_directories(out.parent_path());
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int log_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = log_fd < 0 || null_fd < 0 ? -1 : ::fork();
  if (pid == 0) {
    // The child dies with its parent (SIGTERM: it stops after its current step), and sits in a process group of its
    // own, so a terminal's Ctrl-C reaches it once, through the parent, not twice.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) _exit(127);
    ::setpgid(0, 0);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  ExecResult r;
  if (pid < 0) {
    r.rc = 127;
    r.output = std::string("cannot start ") + argv[0];
  } else {
    // Waits, passing this process's stop request (Ctrl-C, SIGTERM: core/interrupt.h) on to the child once.
    int status = 0;
    bool forwarded = false;
    while (true) {
      const pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid || (w < 0 && errno != EINTR)) break;
      if (!forwarded && interrupted()) {
        ::kill(pid, interrupt_signal() ? interrupt_signal() : SIGTERM);
        forwarded = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.output = temp ? tail_of(out, std::size_t(1) << 20) : tail_of(out, 4096);
  }
  if (temp) std::filesystem::remove(out);
  return r;
}

std::string find_program(std::string_view name) {
  if (name.find('/') != std::string_view::npos) return access(std::string(name).c_str(), X_OK) == 0 ? std::string(name) : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');) {
    const auto p = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

std::string self_exe() {
  if (const char* e = std::getenv("TRAINBENCH_EXE"); e && *e) return e;
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "trainbench" : p.string();
}

}  // namespace tb::report
