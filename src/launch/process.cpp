// launch/process.cpp: fork + execvp with two pipes read by poll (no shell, no terminal).
#include "launch/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace tb::launch {

ProcResult run_process(const std::vector<std::string>& argv) {
  TB_REQUIRE(!argv.empty(), "run_process: no program");
  ProcResult r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    raise_error(Error::Kind::io, "cannot create a pipe to run " + argv[0]);
  const pid_t pid = fork();
  if (pid < 0) raise_error(Error::Kind::io, "cannot fork to run " + argv[0]);
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string find_on_path(std::string_view program) {
  if (program.find('/') != std::string_view::npos)
    return access(std::string(program).c_str(), X_OK) == 0 ? std::string(program) : "";
  const char* path = std::getenv("PATH");
  std::string_view p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!p.empty()) {
    const auto colon = p.find(':');
    const std::string dir(p.substr(0, colon));
    p = colon == std::string_view::npos ? std::string_view{} : p.substr(colon + 1);
    const std::string file = (dir.empty() ? std::string(".") : dir) + "/" + std::string(program);
    struct stat st {};
    if (stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(file.c_str(), X_OK) == 0) return file;
  }
  return {};
}

bool on_path(std::string_view program) { return !find_on_path(program).empty(); }

std::string shell_quote(std::string_view text) {
  constexpr std::string_view safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%";
  if (!text.empty() && text.find_first_not_of(safe) == std::string_view::npos) return std::string(text);
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (const auto& x : items) {
    if (!s.empty()) s += sep;
    s += x;
  }
  return s;
}

std::string shell_join(const std::vector<std::string>& args) {
  std::vector<std::string> q;
  for (const auto& a : args) q.push_back(shell_quote(a));
  return join(q, " ");
}

}  // namespace tb::launch
