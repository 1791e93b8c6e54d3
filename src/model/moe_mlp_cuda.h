// model/moe_mlp_cuda.h: the Mixture-of-Experts MLP of a CUDA decoder block (model/config.h MoeConfig has the math),
// on one GPU's rows (expert parallelism and tensor parallelism are not built for it on CUDA yet):
//   forward   logits = x Wr^T (fp32 out);  route (ops/cuda/moe.h): experts, weights, counts;  dispatch: each pair's
//             permuted row, each expert's aligned start and count (on the device);  xp = permute(x);  per expert e
//             with m_e rows: h_e = xp_e W1e^T, g = act(h) (all rows at once), o_e = g_e W2e^T;  y = unpermute(o) (+
//             the shared experts' y, a DenseMlpCuda over the shared slots)
//   backward  do, dw = unpermute'(dy) (do over o);  per expert: dW2e (+)= do_e^T g_e, dg_e = do_e W2e (over g);
//             dh = act'(dg) (over h);  dW1e (+)= dh_e^T xp_e, dxp_e = dh_e W1e (over xp);  dx = permute'(dxp)
//             (+ the shared experts' dx);  dlogits = router'(dw, the losses);  dx += dlogits Wr;  dWr (+)= dlogits^T x
//             An expert without rows in a step's first micro-batch gets its gradients zeroed (they are written,
//             not accumulated, then).
// The experts' GEMMs: BF16, grouped GEMMs whose group sizes stay on the device (ops/cuda/grouped_gemm.h: one launch
// per linear and pass, no host sync, so the step can be a CUDA graph); FP8 (model/linear_cuda.h), a linear per
// expert with host sizes (the starts and counts copied to the host, one stream sync per layer), each expert's fc1 and
// fc2 casting their own rows with their own scales (per-expert scaling of inputs, weights and output gradients) on
// rows aligned to 16 (zero padding rows), their X^T kept at their rows of xt1 / xt2.
// A proxy of an ep rank (MoeConfig ep_proxy, token_share): the layer holds experts / ep_proxy experts, dispatches pair
// (t, e) to held expert e mod held, and runs on the first rows / token_share rows (y and dx zero on the others).
// Capacity (model/config.h): each expert keeps its C pairs of largest weight (ops/cuda/moe.h moe_dispatch); padded,
// each held expert's GEMMs run on its padded rows, zero past its kept pairs (xp in the forward, do in the backward).
// Aux-loss-free balancing (bias update rate > 0): the route chooses by s + b; the forwards (not a recompute) add the
// pairs per expert to the load, which update_expert_bias() turns into the bias step.
// Kept per activation set (RecomputePolicy): the logits, the routing (experts, weights, per-sequence counts, rows,
// starts, counts) and xp, o unless full recompute; h unless full recompute; g only with the cheap outputs kept. Shared by
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
  ~MoeMlpCuda() override;

  // The routed experts' fc1 and fc2 (expert order), then the shared experts'.
  std::vector<LinearCuda*> linears() override;
  LinearSaved& saved(int set, int k) override;
  int input_linear() const override { return -1; }  // the router reads x in BF16
  int output_linear() const override { return -1; }
  std::int64_t max_linear_rows(std::int64_t rows, int seq) const override;
  void plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int seq,
            const RecomputePolicy& p) override;
  void forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y, bool recompute_only) override;
  void backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                const std::function<void()>& after_dgrad) override;

  // Adds this layer's statistics since reset_stats() to s (one row of tokens_per_expert; synchronizes the stream).
  void add_stats(MoeStats& s, cudaStream_t stream) const;
  void reset_stats(cudaStream_t stream);
  // Aux-loss-free balancing (model/decoder_cuda.h update_expert_bias); nothing without a bias update rate.
  void update_expert_bias(const std::function<void(float*, std::size_t)>& sum_loads, cudaStream_t stream);
  void append_expert_bias(std::vector<float>& out, cudaStream_t stream) const;

 private:
  struct Saved {
    float* logits = nullptr;
    std::int32_t *expert = nullptr, *seq_counts = nullptr, *row_of_pair = nullptr, *start = nullptr, *count = nullptr;
    float* weight = nullptr;
    bf16 *xp = nullptr, *h = nullptr, *g = nullptr, *o = nullptr;
    std::uint8_t *xt1 = nullptr, *xt2 = nullptr;  // FP8: X^T of every held expert's fc1 and fc2 input rows
    std::vector<std::int64_t> host_start, host_rows;  // the last forward's, per held expert: first row, GEMM rows
    double grad_scale = 1;
    std::vector<LinearSaved> lin;  // per linear of linears(): FP8 X^T (into xt1, xt2 at the expert's rows) and scale
  };
  struct Shared {
    float *probs = nullptr, *lse = nullptr, *dweight = nullptr, *loss_scratch = nullptr;
    std::int32_t* dispatch_scratch = nullptr;
    bf16* dlogits = nullptr;
  };
  struct Grouped;  // the BF16 experts' grouped GEMMs and their per-expert pointers
  ops::MoeRouting routing(std::int64_t rows, int seq) const;
  void to_host(const MlpCall& c, Saved& S, bool padded);
  void zero_expert_grads(const LinearEnv& e, int expert) const;
  Grouped& grouped(const LinearEnv& e, const ops::MoeRouting& r);
  const std::int32_t* gemm_rows(const Grouped& G, const Saved& S) const;
  void experts_forward_grouped(const LinearEnv& e, const ops::MoeRouting& r, const Saved& S);
  void experts_forward_linear(const LinearEnv& e, Saved& S);
  void experts_backward_grouped(const LinearEnv& e, const ops::MoeRouting& r, const Saved& S);
  void experts_backward_linear(const LinearEnv& e, const Saved& S);

  MoeConfig moe_;
  int d_ = 0, f_ = 0, f1_ = 0;
  const Slot* router_ = nullptr;  // the router's weight [E, d]
  ops::Activation act_;
  std::vector<LinearCuda> fc1_, fc2_;
  std::unique_ptr<DenseMlpCuda> shared_;
  std::unique_ptr<Grouped> grouped_;  // built at the first BF16 forward
  std::vector<Saved> sets_;
  std::vector<Shared> shared_sets_;  // the shared fields (the same bytes in every set)
  ops::DeviceBuffer bias_;   // [2 E] floats: the expert bias, then the load since its last update (bias update rate)
  ops::DeviceBuffer stats_;  // [3 + E] doubles (ops/cuda/moe.h moe_losses), then the pairs dropped; at the first forward
  std::unique_ptr<std::int32_t[], void (*)(std::int32_t*)> pinned_{nullptr, nullptr};  // [2 E + 1] starts, counts
};

}  // namespace tb::model
