// mlperf/data.cpp: the class-chain task (counter-based, core/counter_rng.h) and the data folder's check.
#include "mlperf/data.h"

#include <fmt/format.h>

#include <cmath>

#include "core/counter_rng.h"
#include "core/error.h"

namespace tb::mlperf {

double ChainTask::loss_floor() const {
  const double q = eps / vocab, p = 1 - eps + q;
  return -p * std::log(p) - (vocab - 1) * q * std::log(q);
}

Rows ChainTask::rows(bool eval, std::int64_t first, int count) const {
  TB_REQUIRE(count > 0 && seq > 0 && vocab >= classes && classes > 0, "MLPerf chain task: bad shape");
  Rows r;
  r.batch = count, r.seq = seq;
  r.tokens.resize(std::size_t(count) * seq);
  r.targets.resize(r.tokens.size());
  const std::int64_t n = eval ? eval_rows : train_rows;
  const std::uint64_t split = splitmix64(seed ^ (eval ? 0xe7a1ull : 0x7a11ull));
  for (int b = 0; b < count; ++b) {
    const std::int64_t row = eval ? first + b : (first + b) % n;
    TB_REQUIRE(row < n, fmt::format("MLPerf chain task: eval row {} of {}", row, n));
    const std::uint64_t rs = splitmix64(split + std::uint64_t(row));
    auto draw = [&](std::uint64_t i) { return uniform_value(rs, i); };
    std::int32_t w = std::int32_t(draw(0) * float(vocab)) % vocab;
    for (int i = 0; i < seq; ++i) {
      std::int32_t next;
      if (draw(2 * std::uint64_t(i) + 1) < float(eps))
        next = std::int32_t(draw(2 * std::uint64_t(i) + 2) * float(vocab)) % vocab;
      else
        next = std::int32_t(splitmix64(seed + std::uint64_t(w % classes)) % std::uint64_t(vocab));
      r.tokens[std::size_t(b) * seq + i] = w;
      r.targets[std::size_t(b) * seq + i] = next;
      w = next;
    }
  }
  return r;
}

std::string check_data_dir(const std::filesystem::path& dir, const std::string& files_needed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fmt::format("--data {}: not a folder; it must hold {}", dir.string(), files_needed);
  std::vector<std::string> missing;
  for (const char* f : {"train.bin", "train.index", "validation.bin", "validation.index"})
    if (!fs::is_regular_file(dir / f, ec)) missing.push_back(f);
  if (missing.empty()) return "";
  return fmt::format("--data {}: missing {}; the folder must hold {} (docs/MLPERF.md, 'Real data')", dir.string(),
                     fmt::join(missing, ", "), files_needed);
}

}  // namespace tb::mlperf
