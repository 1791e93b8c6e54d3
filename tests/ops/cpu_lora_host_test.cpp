// Tests ops/cpu/lora (one LoRA adapter and its input dropout, CPU reference) on random inputs:
//   - forward into a block of columns of a wider output (strided rows) against y + scale · xd A^T B^T written out
//     here in loops, the columns outside the block untouched;
//   - backward (dA, dB accumulated, dxd written) against central finite differences of sum(w ⊙ y) at fp64;
//   - dropout: the kept share near 1 - p on a large tensor, kept elements scaled by dropout_keep_scale(p) ≈
//     1 / (1 - p), the same mask for the same stream and another for another stream; the draws at their rate and
//     independent across the columns of a hash, neighbouring columns and rows; a row-parallel split (column pieces
//     with their col0, even and odd) draws the whole tensor's mask; rows are keyed by their index (a permuted index
//     permutes the mask); the backward passes the gradient of exactly the kept elements; p = 0 is the identity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/counter_rng.h"
#include "ops/cpu/lora.h"

namespace {

namespace cpu = tb::ops::cpu;
using tb::TensorView;

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(g);
  return v;
}

constexpr std::int64_t kRows = 5, kIn = 7, kR = 3, kOut = 4, kWide = 10, kCol0 = 2;
constexpr double kScale = 1.75;

// y [rows, wide] with the adapter on columns [kCol0, kCol0 + kOut).
TensorView<double> block(std::vector<double>& y) {
  return TensorView<double>(y.data() + kCol0, tb::Shape{kRows, kOut}, tb::Shape{kWide, 1}, 2);
}

TEST(Lora, ForwardIntoAColumnBlockMatchesTheFormula) {
  const auto x = random_values(kRows * kIn, 1), a = random_values(kR * kIn, 2), b = random_values(kOut * kR, 3);
  std::vector<double> y = random_values(kRows * kWide, 4), z(kRows * kR);
  const std::vector<double> y0 = y;
  cpu::lora_forward<double>(block(y), {z.data(), {kRows, kR}}, {x.data(), {kRows, kIn}}, {a.data(), {kR, kIn}},
                            {b.data(), {kOut, kR}}, kScale);
  for (std::int64_t t = 0; t < kRows; ++t)
    for (std::int64_t j = 0; j < kWide; ++j) {
      double want = y0[std::size_t(t * kWide + j)];
      if (j >= kCol0 && j < kCol0 + kOut)
        for (std::int64_t q = 0; q < kR; ++q) {
          double zq = 0;
          for (std::int64_t i = 0; i < kIn; ++i) zq += x[std::size_t(t * kIn + i)] * a[std::size_t(q * kIn + i)];
          EXPECT_NEAR(z[std::size_t(t * kR + q)], zq, 1e-14);
          want += kScale * zq * b[std::size_t((j - kCol0) * kR + q)];
        }
      EXPECT_NEAR(y[std::size_t(t * kWide + j)], want, 1e-13) << t << "," << j;
    }
}

// L = sum(w ⊙ y) after the forward: dL/dy = w.
double objective(const std::vector<double>& x, const std::vector<double>& a, const std::vector<double>& b,
                 const std::vector<double>& w) {
  std::vector<double> y(kRows * kWide, 0.0), z(kRows * kR);
  cpu::lora_forward<double>(block(y), {z.data(), {kRows, kR}}, {x.data(), {kRows, kIn}}, {a.data(), {kR, kIn}},
                            {b.data(), {kOut, kR}}, kScale);
  double sum = 0;
  for (std::size_t i = 0; i < y.size(); ++i) sum += w[i] * y[i];
  return sum;
}

TEST(Lora, BackwardMatchesFiniteDifferences) {
  auto x = random_values(kRows * kIn, 5), a = random_values(kR * kIn, 6), b = random_values(kOut * kR, 7);
  auto w = random_values(kRows * kWide, 8);
  std::vector<double> y(kRows * kWide, 0.0), z(kRows * kR);
  cpu::lora_forward<double>(block(y), {z.data(), {kRows, kR}}, {x.data(), {kRows, kIn}}, {a.data(), {kR, kIn}},
                            {b.data(), {kOut, kR}}, kScale);
  std::vector<double> da = random_values(kR * kIn, 9), db = random_values(kOut * kR, 10), dx(kRows * kIn);
  const std::vector<double> da0 = da, db0 = db;  // accumulated onto
  cpu::lora_backward<double>({dx.data(), {kRows, kIn}}, {da.data(), {kR, kIn}}, {db.data(), {kOut, kR}}, block(w),
                             {x.data(), {kRows, kIn}}, {z.data(), {kRows, kR}}, {a.data(), {kR, kIn}},
                             {b.data(), {kOut, kR}}, kScale);
  const double h = 1e-6;
  auto check = [&](std::vector<double>& p, const std::vector<double>& grad, const std::vector<double>& before,
                   const char* what) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double saved = p[i];
      p[i] = saved + h;
      const double lp = objective(x, a, b, w);
      p[i] = saved - h;
      const double lm = objective(x, a, b, w);
      p[i] = saved;
      EXPECT_NEAR(grad[i] - before[i], (lp - lm) / (2 * h), 1e-7) << what << "[" << i << "]";
    }
  };
  check(a, da, da0, "dA");
  check(b, db, db0, "dB");
  check(x, dx, std::vector<double>(dx.size(), 0.0), "dx");
}

cpu::DropoutMask mask(std::uint64_t stream, const std::vector<std::int64_t>& index, std::int64_t col0,
                      std::int64_t cols, double p) {
  return {stream, index, col0, cols, p};
}

TEST(LoraDropout, KeepsAboutOneMinusPScaledAndIsDeterministicPerStream) {
  const std::int64_t rows = 64, cols = 96;
  const double p = 0.3;
  const auto x = random_values(std::size_t(rows * cols), 11);
  std::vector<std::int64_t> index(rows);
  for (std::int64_t t = 0; t < rows; ++t) index[std::size_t(t)] = 1000 + t;
  std::vector<double> a(x.size()), b(x.size()), c(x.size());
  const std::uint64_t stream = tb::step_stream(42, 1);
  const tb::TensorView<const double> xv(x.data(), {rows, cols});
  cpu::lora_dropout_forward<double>({a.data(), {rows, cols}}, xv, mask(stream, index, 0, cols, p));
  cpu::lora_dropout_forward<double>({b.data(), {rows, cols}}, xv, mask(stream, index, 0, cols, p));
  cpu::lora_dropout_forward<double>({c.data(), {rows, cols}}, xv, mask(tb::step_stream(42, 2), index, 0, cols, p));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (a[i] == 0) continue;
    ++kept;
    EXPECT_NEAR(a[i], x[i] * tb::dropout_keep_scale(p), 1e-15);
  }
  EXPECT_NEAR(double(kept) / double(x.size()), 1 - p, 0.02);
  // p = 0: the identity
  cpu::lora_dropout_forward<double>({c.data(), {rows, cols}}, xv, mask(stream, index, 0, cols, 0));
  EXPECT_EQ(c, x);
}

TEST(LoraDropout, ColumnHalvesAndPermutedRowsDrawTheWholeMask) {
  const std::int64_t rows = 6, cols = 8, half = cols / 2;
  const double p = 0.5;
  const auto x = random_values(std::size_t(rows * cols), 12);
  const std::uint64_t stream = tb::step_stream(7, 3);
  std::vector<std::int64_t> index = {5, 0, 3, 2, 4, 1};
  std::vector<double> whole(x.size());
  cpu::lora_dropout_forward<double>({whole.data(), {rows, cols}}, {x.data(), {rows, cols}},
                                    mask(stream, index, 0, cols, p));
  // a row-parallel rank's columns, with their offset in the whole: halves, and pieces at an odd offset
  for (const auto& [col0, width] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, half}, {half, half}, {0, 3},
                                                                                      {3, cols - 3}}) {
    std::vector<double> mine(std::size_t(rows * width));
    const TensorView<const double> xs(x.data() + col0, tb::Shape{rows, width}, tb::Shape{cols, 1}, 2);
    cpu::lora_dropout_forward<double>({mine.data(), {rows, width}}, xs, mask(stream, index, col0, cols, p));
    for (std::int64_t t = 0; t < rows; ++t)
      for (std::int64_t j = 0; j < width; ++j)
        EXPECT_EQ(mine[std::size_t(t * width + j)], whole[std::size_t(t * cols + col0 + j)]) << col0;
  }
  // Row t keyed by index[t]: the rows in natural order (index = t) hold the mask of row index^-1.
  std::vector<std::int64_t> natural = {0, 1, 2, 3, 4, 5};
  std::vector<double> ordered(x.size());
  std::vector<double> xo(x.size());
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t j = 0; j < cols; ++j)
      xo[std::size_t(index[std::size_t(t)] * cols + j)] = x[std::size_t(t * cols + j)];
  cpu::lora_dropout_forward<double>({ordered.data(), {rows, cols}}, {xo.data(), {rows, cols}},
                                    mask(stream, natural, 0, cols, p));
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t j = 0; j < cols; ++j)
      EXPECT_EQ(ordered[std::size_t(index[std::size_t(t)] * cols + j)], whole[std::size_t(t * cols + j)]);
}

// The draws (core/counter_rng.h, 16 bits an element from a hash per column pair, a key per row): the effective rate
// within 2^-17 of p and the scale unbiased for it; on 512 x 1024 elements at p = 0.1 the dropped share near p, and
// the two columns of a pair, neighbouring pairs and neighbouring rows dropped together about p^2 of the time.
TEST(LoraDropout, DrawsAreAtTheRateAndIndependentAcrossColumnsAndRows) {
  for (const double p : {0.0, 0.05, 0.1, 0.25, 0.5, 0.9}) {
    EXPECT_NEAR(tb::dropout_threshold(p) / 65536.0, p, 0x1p-17) << p;
    EXPECT_NEAR(tb::dropout_keep_scale(p) * (1 - tb::dropout_threshold(p) / 65536.0), 1.0, 1e-15) << p;
  }
  const std::int64_t rows = 512, cols = 1024;
  const double p = 0.1;
  std::vector<std::int64_t> index(rows);
  for (std::int64_t t = 0; t < rows; ++t) index[std::size_t(t)] = 7 * t;
  const cpu::DropoutMask m = mask(tb::step_stream(9, 4), index, 0, cols, p);
  std::vector<char> drop(std::size_t(rows * cols));
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t j = 0; j < cols; ++j) drop[std::size_t(t * cols + j)] = !m.keeps(t, j);
  double dropped = 0, pair = 0, next_pair = 0, next_row = 0;
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto d = [&](std::int64_t r, std::int64_t c) { return drop[std::size_t(r * cols + c)] != 0; };
      dropped += d(t, j);
      if (j % 2 == 0) pair += d(t, j) && d(t, j + 1);
      if (j + 2 < cols) next_pair += d(t, j) && d(t, j + 2);
      if (t + 1 < rows) next_row += d(t, j) && d(t + 1, j);
    }
  const double n = double(rows * cols);
  EXPECT_NEAR(dropped / n, p, 0.003);
  EXPECT_NEAR(pair / (n / 2), p * p, 0.002);
  EXPECT_NEAR(next_pair / (rows * (cols - 2.0)), p * p, 0.002);
  EXPECT_NEAR(next_row / ((rows - 1.0) * cols), p * p, 0.002);
}

TEST(LoraDropout, BackwardPassesTheKeptElements) {
  const std::int64_t rows = 4, cols = 16;
  const double p = 0.25;
  const auto x = random_values(std::size_t(rows * cols), 13), g = random_values(std::size_t(rows * cols), 14);
  const std::vector<std::int64_t> index = {0, 1, 2, 3};
  const cpu::DropoutMask m = mask(tb::step_stream(3, 1), index, 0, cols, p);
  std::vector<double> xd(x.size()), dx = random_values(x.size(), 15);
  const std::vector<double> dx0 = dx;
  cpu::lora_dropout_forward<double>({xd.data(), {rows, cols}}, {x.data(), {rows, cols}}, m);
  cpu::lora_dropout_backward<double>({dx.data(), {rows, cols}}, {g.data(), {rows, cols}}, m);
  int dropped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool kept = xd[i] != 0;
    dropped += !kept;
    EXPECT_NEAR(dx[i] - dx0[i], kept ? g[i] * tb::dropout_keep_scale(p) : 0.0, 1e-15) << i;
  }
  EXPECT_GT(dropped, 0);
}

}  // namespace
