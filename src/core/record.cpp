// core/record.cpp: Record -> JSON, schema check, result files below a folder, JSONL sink.
#include "core/record.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

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
  if (j.contains("device") && !j["device"].is_number_integer()) return "'device' must be an integer";
  return {};
}

JsonlSink::JsonlSink(const std::filesystem::path& path, std::string run_id)
    : path_(path), run_id_(std::move(run_id)) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  file_ = std::fopen(path.c_str(), "a");
  if (!file_)
    raise_error(Error::Kind::io, fmt::format("cannot open results file {} for appending: check the folder "
                                             "exists and is writable, or choose another with --out",
                                             path.string()));
}

JsonlSink::~JsonlSink() {
  if (file_) std::fclose(file_);
}

void JsonlSink::write(const Record& r) {
  const std::string line = to_json(r, run_id_).dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    raise_error(Error::Kind::io, fmt::format("cannot write to results file {} (disk full?)", path_.string()));
  ++count_;
}

std::vector<std::filesystem::path> result_files_below(const std::filesystem::path& dir, bool run_json) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".jsonl" || (run_json && e.path().filename() == "run.json")))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace tb
