// core/provenance.cpp: host facts from /proc and uname, the build from build_info, the environment.
#include "core/provenance.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string_view>

#include "core/build_info.h"
#include "core/error.h"

extern char** environ;

namespace tb {

namespace {
std::string read_proc_field(const char* path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(key)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return {};
}
}  // namespace

std::string hostname() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string make_run_id() {
  if (const char* given = std::getenv("TRAINBENCH_RUN_ID"); given && *given) return given;  // shared by a job's ranks
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  std::random_device rd;
  std::string host = hostname();
  if (auto dot = host.find('.'); dot != std::string::npos) host.resize(dot);
  return fmt::format("{:%Y%m%dT%H%M%SZ}-{}-{:04x}", now, host, rd() & 0xffff);
}

LaunchRank launch_rank() {
  auto env_int = [](std::initializer_list<const char*> names, int fallback) {
    for (const char* n : names)
      if (const char* v = std::getenv(n); v && *v) return std::atoi(v);
    return fallback;
  };
  return {env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0),
          env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1)};
}

nlohmann::json relevant_env() {
  nlohmann::json env = nlohmann::json::object();
  constexpr std::string_view prefixes[] = {"NCCL_", "CUDA_", "UCX_", "TRAINBENCH_", "NVIDIA_", "TORCH_",
                                           "OMPI_COMM_WORLD_", "SLURM_JOB", "SLURM_PROCID", "SLURM_NTASKS",
                                           "SLURM_NNODES", "NVSHMEM_"};
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    auto key = kv.substr(0, eq);
    for (auto p : prefixes)
      if (key.starts_with(p)) {
        env[std::string(key)] = std::string(kv.substr(eq + 1));
        break;
      }
  }
  return env;
}

nlohmann::json host_provenance(int argc, char** argv, const std::string& run_id) {
  utsname u{};
  uname(&u);
  std::vector<std::string> args(argv, argv + argc);
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  const auto& b = build_info();
  long mem_kib = 0;
  try {
    mem_kib = std::stol(read_proc_field("/proc/meminfo", "MemTotal"));
  } catch (...) {
  }
  return {
      {"schema", "trainbench.run.v1"},
      {"run", run_id},
      {"time_utc", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", now)},
      {"host", hostname()},
      {"os", fmt::format("{} {} {}", u.sysname, u.release, u.machine)},
      {"cpu", {{"model", read_proc_field("/proc/cpuinfo", "model name")}, {"cores", sysconf(_SC_NPROCESSORS_ONLN)}}},
      {"memory_gib", double(mem_kib) / (1024.0 * 1024.0)},
      {"argv", args},
      {"build",
       {{"version", b.version}, {"git", b.git_describe}, {"type", b.build_type}, {"cuda_archs", b.cuda_archs},
        {"built_at", b.built_at}}},
      {"env", relevant_env()},
  };
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& j) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  // One temporary per process: the ranks of a job may write the same file at once (the last rename wins, whole).
  const auto tmp = std::filesystem::path(fmt::format("{}.{}.tmp", path.string(), getpid()));
  {
    std::ofstream out(tmp);
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) raise_error(Error::Kind::io, fmt::format("cannot write {}: check the folder is writable", tmp.string()));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) raise_error(Error::Kind::io, fmt::format("cannot move {} to {}: {}", tmp.string(), path.string(), ec.message()));
}

std::string write_run_file(const std::filesystem::path& dir, const std::string& run_id, const nlohmann::json& j) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto tmp = dir / fmt::format(".run-{}.{}.tmp", run_id, getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) raise_error(Error::Kind::io, fmt::format("cannot write {}: check the folder is writable", tmp.string()));
  }
  const auto main = dir / "run.json";
  std::string name = "run.json";
  if (::link(tmp.c_str(), main.c_str()) != 0) {  // link: never replaces a file that is there
    std::string other;
    try {
      std::ifstream in(main);
      other = nlohmann::json::parse(in).value("run", "");
    } catch (const std::exception&) {
    }
    if (other != run_id) name = fmt::format("run-{}.json", run_id);
    std::filesystem::rename(tmp, dir / name, ec);
    if (ec)
      raise_error(Error::Kind::io, fmt::format("cannot move {} to {}: {}", tmp.string(), (dir / name).string(),
                                               ec.message()));
  } else {
    std::filesystem::remove(tmp, ec);
  }
  return name;
}

}  // namespace tb
