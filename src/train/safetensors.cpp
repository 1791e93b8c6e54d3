// train/safetensors.cpp: the safetensors reader and writer of safetensors.h (nlohmann-json for the header; POSIX
// write, fsync and rename for the file).
#include "train/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace tb::train {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, written in place");

constexpr std::uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit

std::string file_name(const std::filesystem::path& p) { return fmt::format("safetensors '{}'", p.string()); }

[[noreturn]] void raise_io(const std::string& what, std::string_view action, int err) {
  raise_error(Error::Kind::io, fmt::format("{}: {} ({})", what, action, std::strerror(err)));
}

const char* format_dtype(DType t) { return t == DType::f32 ? "F32" : "BF16"; }

std::string shape_text(const std::vector<std::int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::size_t numel(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= std::size_t(d);
  return n;
}

// The checks save and load share: a name, fp32 or bf16, non-negative dims, data of numel x dtype size bytes.
void check_tensor(const NamedTensor& t, const std::string& what) {
  TB_REQUIRE(!t.name.empty() && t.name != "__metadata__",
             fmt::format("{}: tensor name '{}' is empty or reserved", what, t.name));
  TB_REQUIRE(t.dtype == DType::f32 || t.dtype == DType::bf16,
             fmt::format("{}: tensor '{}' is {}; safetensors files here hold f32 and bf16", what, t.name,
                         dtype_name(t.dtype)));
  for (std::int64_t d : t.shape)
    TB_REQUIRE(d >= 0, fmt::format("{}: tensor '{}' has shape {}", what, t.name, shape_text(t.shape)));
  const std::size_t bytes = numel(t.shape) * dtype_size(t.dtype);
  TB_REQUIRE(t.data.size() == bytes, fmt::format("{}: tensor '{}' {} of {} holds {} bytes, not {}", what, t.name,
                                                 dtype_name(t.dtype), shape_text(t.shape), t.data.size(), bytes));
}

void write_all(int fd, const void* p, std::size_t n, const std::string& what) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) raise_io(what, "cannot write", errno);
    c += w, n -= std::size_t(w);
  }
}

}  // namespace

void save_tensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                  const std::map<std::string, std::string>& metadata) {
  const std::string what = file_name(path);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    check_tensor(t, what);
    TB_REQUIRE(names.insert(t.name).second, fmt::format("{}: tensor '{}' is given twice", what, t.name));
    header[t.name] = {
        {"dtype", format_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::uint64_t n = text.size();

  // The whole file under a temporary name beside the destination, flushed, then renamed over it.
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) raise_io(what, fmt::format("cannot create '{}'", tmp.string()), errno);
  try {
    write_all(fd, &n, sizeof(n), what);
    write_all(fd, text.data(), text.size(), what);
    for (const NamedTensor& t : tensors) write_all(fd, t.data.data(), t.data.size(), what);
    if (::fsync(fd) != 0) raise_io(what, "cannot flush", errno);
  } catch (...) {
    ::close(fd);
    std::filesystem::remove(tmp);
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    std::filesystem::remove(tmp);
    raise_io(what, "cannot close", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::filesystem::remove(tmp);
    raise_io(what, "cannot rename the finished file into place", err);
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {  // the rename, durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<TensorEntry> read_tensor_entries(const std::filesystem::path& path,
                                             std::map<std::string, std::string>* metadata) {
  const std::string what = file_name(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) raise_io(what, "cannot open", errno);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  TB_REQUIRE(!ec && size >= 8, fmt::format("{}: {} bytes, too short for a safetensors file", what, ec ? 0 : size));
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof(n));
  TB_REQUIRE(in && n <= kMaxHeader && n <= size - 8,
             fmt::format("{}: a header of {} bytes in a file of {}; not a safetensors file", what, n, size));
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  TB_REQUIRE(bool(in), fmt::format("{}: cannot read its {}-byte header", what, n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    raise_config(fmt::format("{}: the header is not JSON ({})", what, e.what()));
  }
  TB_REQUIRE(header.is_object(), fmt::format("{}: the header is not a JSON object", what));
  std::vector<TensorEntry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      TB_REQUIRE(v.is_object(), fmt::format("{}: __metadata__ is not an object of texts", what));
      for (const auto& [k, text_v] : v.items()) {
        TB_REQUIRE(text_v.is_string(), fmt::format("{}: __metadata__ '{}' is not a text", what, k));
        if (metadata) (*metadata)[k] = text_v.get<std::string>();
      }
      continue;
    }
    const auto bad = [&](std::string_view why) { raise_config(fmt::format("{}: tensor '{}': {}", what, name, why)); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    TensorEntry e;
    e.name = name;
    const std::string dt = v["dtype"].is_string() ? v["dtype"].get<std::string>() : "";
    if (dt == "F32")
      e.dtype = DType::f32;
    else if (dt == "BF16")
      e.dtype = DType::bf16;
    else
      bad(fmt::format("dtype {} is not read here (F32 or BF16)", v["dtype"].dump()));
    if (!v["shape"].is_array()) bad("shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad(fmt::format("shape {} is not of non-negative integers", v["shape"].dump()));
      e.shape.push_back(d.get<std::int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets is not [begin, end]");
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    const std::size_t bytes = numel(e.shape) * dtype_size(e.dtype);
    if (end < begin || end - begin != bytes || 8 + n + end > size)
      bad(fmt::format("data_offsets [{}, {}] for {} {} ({} bytes) in a file of {} bytes", begin, end, dt,
                      v["shape"].dump(), bytes, size));
    e.offset = std::size_t(8 + n + begin), e.bytes = bytes;
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::size_t at = std::size_t(8 + n);  // the data: covered exactly, without overlaps or holes
  for (const TensorEntry& e : entries) {
    TB_REQUIRE(e.offset == at, fmt::format("{}: tensor '{}' starts at byte {} where the data before it ends at {}; "
                                           "tensors overlap or leave a hole",
                                           what, e.name, e.offset, at));
    at += e.bytes;
  }
  TB_REQUIRE(at == size, fmt::format("{}: the tensors end at byte {} of {}", what, at, size));
  return entries;
}

void load_tensors(const std::filesystem::path& path, std::span<const NamedTensor> into) {
  const std::string what = file_name(path);
  const std::vector<TensorEntry> entries = read_tensor_entries(path);
  std::map<std::string, const TensorEntry*> by_name;
  for (const TensorEntry& e : entries) by_name[e.name] = &e;
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const NamedTensor& t : into) {
    check_tensor(t, "loading " + what);
    wanted.insert(t.name);
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      problems.push_back(fmt::format("'{}' is missing", t.name));
    } else if (it->second->dtype != t.dtype || it->second->shape != t.shape) {
      problems.push_back(fmt::format("'{}' is {} {} in the file, {} {} here", t.name, dtype_name(it->second->dtype),
                                     shape_text(it->second->shape), dtype_name(t.dtype), shape_text(t.shape)));
    }
  }
  for (const TensorEntry& e : entries)
    if (!wanted.contains(e.name)) problems.push_back(fmt::format("'{}' is in the file but not here", e.name));
  TB_REQUIRE(problems.empty(), fmt::format("{}: does not match the tensors it is loaded into: {}; nothing was loaded",
                                           what, fmt::join(problems, "; ")));
  std::vector<std::byte> data;  // read whole first: a short read leaves the tensors as they were
  std::ifstream in(path, std::ios::binary);
  if (!in) raise_io(what, "cannot open", errno);
  const std::size_t first = entries.empty() ? 0 : entries.front().offset;
  data.resize(entries.empty() ? 0 : entries.back().offset + entries.back().bytes - first);
  in.seekg(std::streamoff(first));
  in.read(reinterpret_cast<char*>(data.data()), std::streamsize(data.size()));
  TB_REQUIRE(bool(in), fmt::format("{}: cannot read its {} bytes of tensors", what, data.size()));
  for (const NamedTensor& t : into) {
    const TensorEntry& e = *by_name.at(t.name);
    std::memcpy(t.data.data(), data.data() + (e.offset - first), e.bytes);
  }
}

}  // namespace tb::train
