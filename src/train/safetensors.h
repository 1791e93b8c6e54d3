// train/safetensors.h: named tensors saved to and loaded from a safetensors file (the Hugging Face format, read and
// written natively): adapter checkpoints and their resume.
//   bytes [0, 8)        N, the header's length, u64 little-endian
//   bytes [8, 8 + N)    the header, a JSON object: per tensor "name": {"dtype": "F32" | "BF16", "shape": [d0, ...],
//                       "data_offsets": [begin, end]}, offsets into the data below (end - begin = numel x dtype
//                       size); an optional "__metadata__": {"key": "text", ...}. Written padded with spaces to a
//                       multiple of 8 bytes, tensors in the order given, packed back to back.
//   bytes [8 + N, ...)  the tensors' raw little-endian elements, row-major
// save_tensors writes the whole file beside its destination (a temporary name, flushed to disk) and renames it over
// the destination, so a crash or an error leaves the old file as it was. load_tensors reads a file into tensors named
// as the file's: the names, dtypes and shapes must match exactly (a file of other tensors, or of a tensor of another
// shape, is refused, naming each difference); every check comes before any copy, so nothing is overwritten on an
// error. Error{io} when a file cannot be opened, read or written; Error{config} for a malformed file or a mismatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tb::train {

// A tensor on the host: fp32 or bf16 (bf16 as its 16 bits), row-major, numel(shape) x dtype_size bytes of data
// (save reads it, load writes it).
struct NamedTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::span<std::byte> data;
};

// What a file holds, without its data: name, dtype, shape, and where the data lies in the file.
struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0, bytes = 0;  // from the start of the file
};

void save_tensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                  const std::map<std::string, std::string>& metadata = {});
void load_tensors(const std::filesystem::path& path, std::span<const NamedTensor> into);
// The file's tensors in the order of their data, and its metadata (checked as load_tensors checks the file).
std::vector<TensorEntry> read_tensor_entries(const std::filesystem::path& path,
                                             std::map<std::string, std::string>* metadata = nullptr);

}  // namespace tb::train
