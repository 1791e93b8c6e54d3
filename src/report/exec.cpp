// report/exec.cpp: posix_spawnp with the child's stdout/stderr redirected to a file (see exec.h).
#include "report/exec.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ExecResult r;
  if (err != 0) {
    r.rc = 127;
    r.output = std::string("cannot start ") + argv[0];
  } else {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
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
