// train/mapped_file.h: a regular file mapped read-only into memory (mmap), unmapped on destruction; what the data
// readers (train/data.h's token file, train/packed_data.h's packed documents) read in place.
// The constructor refuses, naming the file with `what` ("token file 'x.bin': ..."): a path it cannot open, stat or map
// (Error{io}, with the system's reason), something that is not a regular file, an empty file (Error{config}).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace tb::train {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const std::filesystem::path& path, const std::string& what);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  void unmap() noexcept;
  const std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tb::train
