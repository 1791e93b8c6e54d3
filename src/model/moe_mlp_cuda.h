// model/moe_mlp_cuda.h: the Mixture-of-Experts MLP of a CUDA decoder block (model/config.h MoeConfig has the math),
// BF16, dropless, on one GPU's rows (expert parallelism and tensor parallelism are not built for it yet):
//   forward   logits = x Wr^T (fp32 out);  route (ops/cuda/moe.h): experts, weights, counts;  dispatch: each pair's
//             permuted row, each expert's aligned start;  the starts and counts to the host (one stream sync per
//             layer: the expert GEMMs take host sizes);  xp = permute(x);  per expert e with n_e rows:
//             h_e = xp_e W1e^T, g = act(h) (all rows at once), o_e = g_e W2e^T;  y = unpermute(o) (+ the shared
//             experts' y, a DenseMlpCuda over the shared slots)
//   backward  do, dw = unpermute'(dy) (do over o);  per expert: dg_e = do_e W2e (over g), dW2e (+)= do_e^T g_e;
//             dh = act'(dg) (over h);  dxp_e = dh_e W1e (over xp), dW1e (+)= dh_e^T xp_e;  dx = permute'(dxp)
//             (+ the shared experts' dx);  dlogits = router'(dw, the losses);  dx += dlogits Wr;  dWr (+)= dlogits^T x
//             An expert without rows in a step's first micro-batch gets its gradients zeroed (they are written,
//             not accumulated, then).
// Kept per activation set (RecomputePolicy): the logits, the routing (experts, weights, per-sequence counts, rows,
// starts) and xp, o unless full recompute; h unless full recompute; g only with the cheap outputs kept. Shared by
// the layers: the probabilities and lse (the losses' values), dw, dlogits, the dispatch scratch.
// The losses' values and the tokens per expert accumulate on the device (model/moe_stats.h) until reset_stats().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/mlp_cuda.h"
#include "model/moe_stats.h"
#include "ops/cuda/context.h"
#include "ops/cuda/moe.h"

namespace tb::model {

class MoeMlpCuda final : public MlpCuda {
 public:
  MoeMlpCuda(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer);

  // The routed experts' fc1 and fc2 (expert order), then the shared experts'.
  std::vector<LinearCuda*> linears() override;
  LinearSaved& saved(int set, int k) override;
  int input_linear() const override { return -1; }  // the router reads x in BF16
  int output_linear() const override { return -1; }
  void plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int seq,
            const RecomputePolicy& p) override;
  void forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y, bool recompute_only) override;
  void backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                const std::function<void()>& after_dgrad) override;

  // Adds this layer's statistics since reset_stats() to s (one row of tokens_per_expert; synchronizes the stream).
  void add_stats(MoeStats& s, cudaStream_t stream) const;
  void reset_stats(cudaStream_t stream);

 private:
  struct Saved {
    float* logits = nullptr;
    std::int32_t *expert = nullptr, *seq_counts = nullptr, *row_of_pair = nullptr, *start = nullptr;
    float* weight = nullptr;
    bf16 *xp = nullptr, *h = nullptr, *g = nullptr, *o = nullptr;
    std::vector<std::int64_t> host_start, host_count;  // the last forward's, per expert
    double grad_scale = 1;
    LinearSaved lin;  // (BF16: nothing)
  };
  struct Shared {
    float *probs = nullptr, *lse = nullptr, *dweight = nullptr, *loss_scratch = nullptr;
    std::int32_t *count = nullptr, *dispatch_scratch = nullptr;
    bf16* dlogits = nullptr;
  };
  ops::MoeRouting routing(std::int64_t rows, int seq) const;
  void to_host(const MlpCall& c, Saved& S, const Shared& X);
  void zero_expert_grads(const LinearEnv& e, int expert) const;

  MoeConfig moe_;
  int d_ = 0, f_ = 0, f1_ = 0;
  const Slot* router_ = nullptr;  // the router's weight [E, d]
  ops::Activation act_;
  std::vector<LinearCuda> fc1_, fc2_;
  std::unique_ptr<DenseMlpCuda> shared_;
  std::vector<Saved> sets_;
  std::vector<Shared> shared_sets_;  // the shared fields (the same bytes in every set)
  ops::DeviceBuffer stats_;          // [3 + E] doubles (ops/cuda/moe.h moe_losses), allocated at the first forward
  std::unique_ptr<std::int32_t[], void (*)(std::int32_t*)> pinned_{nullptr, nullptr};  // [2 E + 1] starts, counts
};

}  // namespace tb::model
