// tests/support/packed_files.h: writes packed data (train/packed_data.h's FILE.bin + FILE.index, uint16 tokens) for
// tests: each document its tokens and its loss spans [begin, end) of target positions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace tb::testing_support {

struct DocSpec {
  std::vector<std::uint16_t> tokens;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> spans;
};

// Writes BASE.bin and BASE.index; returns BASE.index.
inline std::filesystem::path write_packed(const std::filesystem::path& base, const std::vector<DocSpec>& docs) {
  const auto put = [](std::string& s, const void* p, std::size_t n) { s.append(static_cast<const char*>(p), n); };
  std::string bin, index("TBPACK01", 8), doc_part, span_part;
  std::uint32_t spans = 0;
  std::uint64_t at = 0;
  for (const DocSpec& d : docs) {
    put(bin, d.tokens.data(), d.tokens.size() * 2);
    const auto len = std::uint32_t(d.tokens.size());
    put(doc_part, &at, 8), put(doc_part, &len, 4), put(doc_part, &spans, 4);
    for (const auto& [b, e] : d.spans) put(span_part, &b, 4), put(span_part, &e, 4), ++spans;
    at += len;
  }
  const std::uint32_t size = 2, zero = 0;
  const std::uint64_t nd = docs.size(), ns = spans;
  put(index, &size, 4), put(index, &zero, 4), put(index, &nd, 8), put(index, &ns, 8);
  index += doc_part + span_part;
  std::ofstream(base.string() + ".bin", std::ios::binary) << bin;
  std::ofstream(base.string() + ".index", std::ios::binary) << index;
  return base.string() + ".index";
}

}  // namespace tb::testing_support
