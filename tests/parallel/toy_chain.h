// tests/parallel/toy_chain.h: a toy model for the pipeline executor tests, in double. Global stage k maps each row
// x (width d) of a micro-batch to y = tanh(W_k x + b_k); the last stage's loss is 0.5·|y|² over the rows.
// Micro-batch mb has 1 + mb % 3 rows of inputs drawn from its index (so activation sizes differ between
// micro-batches and a message routed to the wrong one has the wrong size or values). Backward of a stage:
// dz = dy ⊙ (1 − y²);  dW_k += dz xᵀ;  db_k += dz;  dx = W_kᵀ dz  (dy = y on the last stage).
// reference() runs the whole chain on one rank; ToyStage is one pipeline rank's chunks of the same chain.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "parallel/pipeline.h"

namespace tb::parallel::testing {

inline std::size_t uz(int v) { return static_cast<std::size_t>(v); }

struct ChainGrads {
  double loss = 0;
  std::vector<std::vector<double>> dW, db;  // per global stage, summed over micro-batches
};

class ToyChain {
 public:
  ToyChain(int stages, int d, unsigned seed) : stages_(stages), d_(d) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int k = 0; k < stages; ++k) {
      std::vector<double> w(uz(d * d)), b(uz(d));
      for (double& v : w) v = 1.5 * u(rng) / std::sqrt(double(d));
      for (double& v : b) v = 0.1 * u(rng);
      W_.push_back(std::move(w));
      b_.push_back(std::move(b));
    }
  }
  int stages() const { return stages_; }
  int width() const { return d_; }
  static int rows(int mb) { return 1 + mb % 3; }
  std::size_t size(int mb) const { return uz(rows(mb) * d_); }

  std::vector<double> input(int mb) const {
    std::mt19937_64 rng(1000 + unsigned(mb));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> x(size(mb));
    for (double& v : x) v = u(rng);
    return x;
  }
  // y = tanh(W_k x + b_k), row by row.
  void forward(int k, std::span<const double> x, std::span<double> y) const {
    const auto& w = W_[uz(k)];
    for (std::size_t row = 0; row < x.size() / uz(d_); ++row)
      for (int i = 0; i < d_; ++i) {
        double z = b_[uz(k)][uz(i)];
        for (int j = 0; j < d_; ++j) z += w[uz(i * d_ + j)] * x[row * uz(d_) + uz(j)];
        y[row * uz(d_) + uz(i)] = std::tanh(z);
      }
  }
  // Accumulates dW, db of stage k; writes dx unless it is empty.
  void backward(int k, std::span<const double> x, std::span<const double> y, std::span<const double> dy,
                std::vector<double>& dW, std::vector<double>& db, std::span<double> dx) const {
    const auto& w = W_[uz(k)];
    std::vector<double> dz(uz(d_));
    for (double& v : dx) v = 0;
    for (std::size_t row = 0; row < x.size() / uz(d_); ++row) {
      const std::size_t o = row * uz(d_);
      for (int i = 0; i < d_; ++i) {
        const double yi = y[o + uz(i)];
        dz[uz(i)] = dy[o + uz(i)] * (1 - yi * yi);
        db[uz(i)] += dz[uz(i)];
        for (int j = 0; j < d_; ++j) dW[uz(i * d_ + j)] += dz[uz(i)] * x[o + uz(j)];
      }
      if (dx.empty()) continue;
      for (int i = 0; i < d_; ++i)
        for (int j = 0; j < d_; ++j) dx[o + uz(j)] += w[uz(i * d_ + j)] * dz[uz(i)];
    }
  }
  static double loss(std::span<const double> y) {
    double l = 0;
    for (double v : y) l += 0.5 * v * v;
    return l;
  }
  ChainGrads zero_grads() const {
    ChainGrads g;
    g.dW.assign(uz(stages_), std::vector<double>(uz(d_ * d_)));
    g.db.assign(uz(stages_), std::vector<double>(uz(d_)));
    return g;
  }

  // The whole chain on one rank, micro-batch after micro-batch.
  ChainGrads reference(int micro_batches) const {
    ChainGrads g = zero_grads();
    for (int mb = 0; mb < micro_batches; ++mb) {
      std::vector<std::vector<double>> act{input(mb)};  // act[k]: input of stage k; act[stages]: output
      for (int k = 0; k < stages_; ++k) {
        act.emplace_back(size(mb));
        forward(k, act[uz(k)], act[uz(k + 1)]);
      }
      g.loss += loss(act.back());
      std::vector<double> dy = act.back(), dx(size(mb));
      for (int k = stages_ - 1; k >= 0; --k) {
        backward(k, act[uz(k)], act[uz(k + 1)], dy, g.dW[uz(k)], g.db[uz(k)],
                 k > 0 ? std::span<double>(dx) : std::span<double>());
        std::swap(dy, dx);
      }
    }
    return g;
  }

 private:
  int stages_, d_;
  std::vector<std::vector<double>> W_, b_;
};

// This rank's chunks of the chain: chunk c is global stage c·pp + rank. Gradients land in grads (all stages
// sized; only this rank's are touched).
class ToyStage : public PipelineStage<double> {
 public:
  ToyStage(const ToyChain& chain, const PipelineShape& shape, int rank)
      : chain_(chain), shape_(shape), rank_(rank), grads(chain.zero_grads()) {}

  std::size_t activation_size(int mb) const override { return chain_.size(mb); }
  double forward(int mb, int chunk, std::span<const double> in, std::span<double> out) override {
    const bool first = shape_.first_stage(rank_, chunk), last = shape_.last_stage(rank_, chunk);
    EXPECT_EQ(in.empty(), first);
    EXPECT_EQ(out.empty(), last);
    Saved& s = saved_[{mb, chunk}];
    s.x = first ? chain_.input(mb) : std::vector<double>(in.begin(), in.end());
    s.y.resize(chain_.size(mb));
    EXPECT_EQ(s.x.size(), chain_.size(mb));
    if (s.x.size() != s.y.size()) return 0;  // a misrouted activation: fail, do not crash
    chain_.forward(shape_.stage_of(rank_, chunk), s.x, s.y);
    if (!last) std::copy(s.y.begin(), s.y.end(), out.begin());
    return last ? ToyChain::loss(s.y) : 0;
  }
  void backward(int mb, int chunk, std::span<const double> dout, std::span<double> din) override {
    const bool first = shape_.first_stage(rank_, chunk), last = shape_.last_stage(rank_, chunk);
    EXPECT_EQ(dout.empty(), last);
    EXPECT_EQ(din.empty(), first);
    auto it = saved_.find({mb, chunk});
    ASSERT_NE(it, saved_.end()) << "backward " << mb << "." << chunk << " before its forward";
    const Saved& s = it->second;
    std::span<const double> dy = last ? std::span<const double>(s.y) : dout;
    ASSERT_EQ(dy.size(), s.y.size());
    const int k = shape_.stage_of(rank_, chunk);
    chain_.backward(k, s.x, s.y, dy, grads.dW[uz(k)], grads.db[uz(k)], din);
    saved_.erase(it);
  }

 private:
  struct Saved {
    std::vector<double> x, y;
  };
  const ToyChain& chain_;
  PipelineShape shape_;
  int rank_;
  std::map<std::pair<int, int>, Saved> saved_;

 public:
  ChainGrads grads;
};

}  // namespace tb::parallel::testing
