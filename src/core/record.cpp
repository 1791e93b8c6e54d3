// core/record.cpp: Record -> JSON, schema check, result files below a folder, JSONL sink.
#include "core/record.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace tb {

std::string_view status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::error: return "error";
    case Status::skipped: return "skipped";
    case Status::interrupted: return "interrupted";
  }
  return "error";
}

Record Record::failed(std::string bench, std::string name, const Error& e) {
  Record r = failed(std::move(bench), std::move(name), kind_name(e.kind()), e.what());
  r.error_fatal = e.fatal();
  return r;
}

Record Record::failed(std::string bench, std::string name, std::string_view kind, std::string_view msg) {
  Record r;
  r.bench = std::move(bench);
  r.name = std::move(name);
  r.status = Status::error;
  r.error_kind = kind;
  r.error_msg = msg;
  return r;
}

Record Record::skipped(std::string bench, std::string name, std::string reason) {
  Record r;
  r.bench = std::move(bench);
  r.name = std::move(name);
  r.status = Status::skipped;
  r.reason = std::move(reason);
  return r;
}

nlohmann::json to_json(const Record& r, std::string_view run_id) {
  nlohmann::json j = {{"schema", kResultSchema}, {"run", run_id}, {"bench", r.bench},
                      {"case", r.name},          {"world", r.world}, {"status", status_name(r.status)}};
  if (r.device) j["device"] = *r.device;
  if (r.status == Status::error)
    j["error"] = {{"kind", r.error_kind}, {"fatal", r.error_fatal}, {"msg", r.error_msg}};
  if (r.status == Status::skipped) j["reason"] = r.reason;
  for (const auto& [k, v] : r.data.items())
    if (!j.contains(k)) j[k] = v;  // the fixed keys above win
  return j;
}

namespace {

// Keys whose values are measurements, by the unit in their name (DESIGN: units are in key names).
bool unit_key(std::string_view k) {
  constexpr std::string_view suffixes[] = {"_s",       "_ms",        "_us",       "_ns",     "_gib", "_gb",
                                           "_gbps",    "_tbps",      "_w",        "_j",      "_mhz", "_per_s",
                                           "_per_gpu", "_per_token", "_per_step", "_tflops", "_se"};
  if (k == "tflops" || k == "mfu" || k == "world" || k == "bytes") return true;
  for (auto s : suffixes)
    if (k.size() > s.size() && k.ends_with(s)) return true;
  return false;
}

std::string check_types(const nlohmann::json& v, const std::string& path, bool numeric) {
  if (v.is_object()) {
    if (numeric && v.empty()) return fmt::format("'{}' must be a number, not an empty object", path);
    for (const auto& [k, x] : v.items())
      if (auto p = check_types(x, path.empty() ? k : path + "." + k, numeric || unit_key(k)); !p.empty()) return p;
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i)
      if (auto p = check_types(v[i], fmt::format("{}[{}]", path, i), numeric); !p.empty()) return p;
  } else if (numeric && !v.is_number() && !v.is_null()) {
    return fmt::format("'{}' must be a number, not {} {}", path, v.is_string() ? "the string" : "the value",
                       dump_line(v).substr(0, 40));
  }
  return {};
}

}  // namespace

std::string dump_line(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string check_record(const nlohmann::json& j) {
  if (!j.is_object()) return "record is not a JSON object";
  for (const char* key : {"schema", "run", "bench", "case", "status"})
    if (!j.contains(key) || !j[key].is_string()) return fmt::format("missing string key '{}'", key);
  if (j["schema"] != kResultSchema) return fmt::format("schema is '{}', expected '{}'", j["schema"].get<std::string>(), kResultSchema);
  if (!j.contains("world") || !j["world"].is_number_integer() || j["world"].get<int>() < 1)
    return "missing or invalid 'world' (integer >= 1)";
  const auto status = j["status"].get<std::string>();
  if (status == "error") {
    if (!j.contains("error") || !j["error"].contains("kind") || !j["error"].contains("msg"))
      return "status 'error' needs error {kind, msg}";
  } else if (status == "skipped") {
    if (!j.contains("reason") || !j["reason"].is_string()) return "status 'skipped' needs a 'reason'";
  } else if (status != "ok" && status != "interrupted") {
    return fmt::format("unknown status '{}'", status);
  }
  // A GPU index; `train` records name their backend ("cuda", "cpu") under the same key.
  if (j.contains("device") && !j["device"].is_number_integer() && !j["device"].is_string())
    return "'device' must be a GPU index or a backend name";
  if (status == "error" && (!j["error"].is_object() || !j["error"]["msg"].is_string()))
    return "'error' must be {kind, fatal, msg} with a string msg";
  return check_types(j, "", false);
}

JsonlSink::JsonlSink(const std::filesystem::path& path, std::string run_id)
    : path_(path), run_id_(std::move(run_id)) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    raise_error(Error::Kind::io, fmt::format("cannot open results file {} for appending ({}): check the folder "
                                             "exists and is writable, or choose another with --out",
                                             path.string(), std::strerror(errno)));
  // A line left incomplete by a run that was killed while writing it: cut off, so the next record starts a line of
  // its own. Locked: the ranks of a job open the file at about the same time.
  ::flock(fd_, LOCK_EX);
  struct stat st {};
  ::fstat(fd_, &st);
  dev_ = st.st_dev, ino_ = st.st_ino;
  off_t end = st.st_size, keep = end;
  char buf[4096];
  while (keep > 0) {
    const off_t from = std::max<off_t>(0, keep - off_t(sizeof buf));
    const ssize_t n = ::pread(fd_, buf, size_t(keep - from), from);
    if (n <= 0) break;
    const char* nl = static_cast<const char*>(memrchr(buf, '\n', size_t(n)));
    if (nl) {
      keep = from + (nl - buf) + 1;
      break;
    }
    keep = from;
  }
  if (keep < end && ::ftruncate(fd_, keep) == 0) {
    cut_bytes_ = int(end - keep);
    log::warn("{}: its last line was incomplete ({} bytes, from a run stopped while writing it): cut off; the "
              "records before it are kept",
              path.string(), cut_bytes_);
  }
  ::flock(fd_, LOCK_UN);
}

JsonlSink::~JsonlSink() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlSink::write(const Record& r) {
  const std::string line = dump_line(to_json(r, run_id_)) + "\n";
  size_t done = 0;
  while (done < line.size()) {  // one write() for the whole line but on a short write or a signal
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      raise_error(Error::Kind::io, fmt::format("cannot write to results file {} ({})", path_.string(),
                                               n < 0 ? std::strerror(errno) : "nothing written"));
    done += size_t(n);
  }
  ++count_;
}

bool JsonlSink::still_there() const {
  struct stat st {};
  return ::stat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
}

std::vector<std::filesystem::path> result_files_below(const std::filesystem::path& dir, bool run_json) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  auto it = std::filesystem::recursive_directory_iterator(dir, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const auto& p = it->path();
    const std::string name = p.filename().string();
    const bool run_file = name == "run.json" || (name.starts_with("run-") && p.extension() == ".json");
    std::error_code ec2;
    if (it->is_regular_file(ec2) && (p.extension() == ".jsonl" || (run_json && run_file))) files.push_back(p);
  }
  if (ec)
    raise_config(fmt::format("cannot read the results folder {}: {}{}", dir.string(), ec.message(),
                             it != std::filesystem::recursive_directory_iterator() ? " at " + it->path().string() : ""));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace tb
