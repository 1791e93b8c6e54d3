// ops/cpu/cross_entropy.cpp: softmax cross-entropy (loss and dlogits) and the chunked LM head + CE;
// formulas in cross_entropy.h. Softmax sums in double.
#include "ops/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/linear.h"

namespace tb::ops::cpu {
namespace {

// Sum of the rows' losses (times their weights, when given); when dlogits is present writes (softmax - onehot) *
// scale (* the row's weight) into it (dlogits may alias logits: each row is read before it is written).
template <class T>
double ce_rows(TensorView<T> dlogits, TensorView<const T> logits, std::span<const std::int32_t> targets,
               double scale, std::span<const double> weights) {
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  double loss = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t target = targets[std::size_t(r)];
    TB_REQUIRE(target >= 0 && target < vocab, "cross_entropy: target " + std::to_string(target) + " of row " +
                                                  std::to_string(r) + " is outside [0, " +
                                                  std::to_string(vocab) + ")");
    const T* z = row(logits, r);
    double mx = z[0];
    for (std::int64_t v = 1; v < vocab; ++v) mx = std::max(mx, double(z[v]));
    double sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - mx);
    const double lse = mx + std::log(sum);
    const double w = weights.empty() ? 1.0 : weights[std::size_t(r)];
    loss += w * (lse - z[target]);
    if (!present(dlogits)) continue;
    T* dz = row(dlogits, r);
    for (std::int64_t v = 0; v < vocab; ++v)
      dz[v] = T((std::exp(double(z[v]) - lse) - (v == target ? 1.0 : 0.0)) * scale * w);
  }
  return loss;
}

void check_weights(std::span<const double> weights, std::int64_t rows, const char* what) {
  TB_REQUIRE(weights.empty() || std::int64_t(weights.size()) == rows,
             std::string(what) + ": " + std::to_string(weights.size()) + " loss weights for " + std::to_string(rows) +
                 " rows");
}

}  // namespace

template <class T>
double cross_entropy(TensorView<T> dlogits, In<T> logits, std::span<const std::int32_t> targets,
                     double grad_scale, std::span<const double> weights) {
  require_rows(logits, "cross_entropy: logits");
  const std::int64_t rows = logits.size(0);
  TB_REQUIRE(rows >= 1 && std::int64_t(targets.size()) == rows,
             "cross_entropy: " + std::to_string(targets.size()) + " targets for logits " + logits.shape_str());
  check_weights(weights, rows, "cross_entropy");
  if (present(dlogits)) {
    require_shape(dlogits, {rows, logits.size(1)}, "cross_entropy: dlogits");
    require_rows(dlogits, "cross_entropy: dlogits");
  }
  const double per_row = weights.empty() ? double(rows) : 1.0;  // the mean, or the weighted sum
  return ce_rows<T>(dlogits, logits, targets, grad_scale / per_row, weights) / per_row;
}

template <class T>
double lm_head_cross_entropy(TensorView<T> dx, TensorView<T> dw, In<T> x, In<T> w,
                             std::span<const std::int32_t> targets, int chunk, double grad_scale,
                             std::span<const double> weights) {
  require_rows(x, "lm_head_cross_entropy: x");
  require_rows(w, "lm_head_cross_entropy: W");
  const std::int64_t rows = x.size(0), vocab = w.size(0);
  TB_REQUIRE(rows >= 1 && std::int64_t(targets.size()) == rows,
             "lm_head_cross_entropy: " + std::to_string(targets.size()) + " targets for x " + x.shape_str());
  TB_REQUIRE(w.size(1) == x.size(1), "lm_head_cross_entropy: x " + x.shape_str() + " and W " + w.shape_str() +
                                         " disagree on the hidden size (W is [vocab, hidden])");
  TB_REQUIRE(chunk >= 1, "lm_head_cross_entropy: chunk must be >= 1 token, got " + std::to_string(chunk));
  check_weights(weights, rows, "lm_head_cross_entropy");
  const double per_row = weights.empty() ? double(rows) : 1.0;  // the mean, or the weighted sum
  const bool backward = present(dx) || present(dw);
  const std::int64_t c_max = std::min<std::int64_t>(chunk, rows);
  std::vector<T> buf(std::size_t(c_max * vocab));  // logits of one chunk, then its dlogits (in place)
  double loss = 0;
  for (std::int64_t r0 = 0; r0 < rows; r0 += c_max) {
    const std::int64_t r1 = std::min(rows, r0 + c_max), n = r1 - r0;
    TensorView<T> logits(buf.data(), {n, vocab});
    const auto x_c = x.slice0(r0, r1);
    const auto t_c = targets.subspan(std::size_t(r0), std::size_t(n));
    linear_forward<T>(logits, x_c, w);
    const auto w_c = weights.empty() ? weights : weights.subspan(std::size_t(r0), std::size_t(n));
    loss += ce_rows<T>(backward ? logits : TensorView<T>{}, logits, t_c, grad_scale / per_row, w_c);
    if (backward)
      linear_backward<T>(present(dx) ? dx.slice0(r0, r1) : TensorView<T>{}, dw, {}, logits, x_c, w);
  }
  return loss / per_row;
}

#define TB_INSTANTIATE(T)                                                                                  \
  template double cross_entropy<T>(TensorView<T>, In<T>, std::span<const std::int32_t>, double,             \
                                   std::span<const double>);                                                  \
  template double lm_head_cross_entropy<T>(TensorView<T>, TensorView<T>, In<T>, In<T>,                     \
                                           std::span<const std::int32_t>, int, double, std::span<const double>);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
