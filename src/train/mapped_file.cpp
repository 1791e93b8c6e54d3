// train/mapped_file.cpp: see mapped_file.h.
#include "train/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace tb::train {
namespace {

[[noreturn]] void raise_io(const std::string& what, std::string_view action, int err) {
  raise_error(Error::Kind::io, fmt::format("{}: {} ({}); check the path and permissions", what, action,
                                           std::strerror(err)));
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io(what, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    raise_io(what, "cannot stat", err);
  }
  const auto fail = [&](const std::string& msg) {
    ::close(fd);
    raise_config(msg);
  };
  if (!S_ISREG(st.st_mode)) fail(fmt::format("{}: not a regular file", what));
  const auto bytes = std::size_t(st.st_size);
  if (bytes == 0) fail(fmt::format("{}: the file is empty", what));
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) raise_io(what, "cannot mmap", err);
  data_ = static_cast<const std::byte*>(p);
  bytes_ = bytes;
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace tb::train
