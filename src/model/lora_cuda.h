// model/lora_cuda.h: the LoRA adapters of one CUDA linear (model/lora.h has the math, ops/cuda/lora.h the dropout), in
// BF16 whatever the base's precision, s = alpha / r, per adapter k on output rows [row0, row0 + rows) of the linear:
//   forward   xd = dropout(x) (p > 0; else xd = x);  z_k = xd A_k^T [n, r] (kept for the backward)
//             y[:, block] += s · z_k B_k^T                      (one GEMM: alpha s, accumulating, rows `out` apart)
//   backward  dz_k = dy[:, block] B_k [n, r]
//             dB_k (+)= s · dy[:, block]^T z_k;   dA_k (+)= s · dz_k^T xd   (xd drawn again from x: not stored)
//             (dz_k and dB_k in one read of dy, ops::lora_out_grad, where it takes the blocks; then with dz)
//             dx += s · dropout'(dz_k A_k)
// Or written instead of added, for a base GEMM that then accumulates onto them (model/linear_cuda.h): y's blocks
// where they cover all of y (covers_output), dx where the input gradient is fused or has no dropout
// (writes_input_grad).
// With dropout, the down-projections z_k, dA_k and the input gradient are ops/cuda/lora.h's fused products where they
// take the shape (fused(): xd never written, one pass over x or dx for all the linear's adapters); else xd is written
// into the workspace (ops::lora_dropout) for cuBLASLt GEMMs and dx gets s · dz_k A_k through a scratch t
// (ops::lora_dropout_add). Without dropout the GEMMs read x, and dx += s · dz_k A_k is one accumulating GEMM.
// x, dx, y, dy as the linear sees them: a column-parallel linear's x is the gathered input and y this rank's output
// columns (dz_k and so A's gradient are partial sums over tp, summed as a replicated slot's); a row-parallel one's x
// its input columns (the mask's col0) and y the partial sums before the reduce-scatter (B's gradient partial over
// tp). The weight gradients are written instead of accumulated when LinearEnv::overwrite (a step's first pass).
// Per activation set the linear keeps z_k of every adapter (LinearSaved::lora_z, lora_z_stride elements apart); the
// decoder lends the workspace (workspace_bytes), t [n, in] (unfused dropout) and dz [adapters][n, r] (LinearEnv).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/lora.h"
#include "model/param_layout.h"
#include "model/params.h"
#include "ops/cuda/lora.h"

namespace tb::model {

struct LinearEnv;
struct LinearSaved;

class LoraCuda {
 public:
  using bf16 = __nv_bfloat16;
  LoraCuda() = default;
  // The adapters of the linear whose weight is `w` (their slots in `registry`).
  LoraCuda(const ParamRegistry& registry, const Slot& w, const std::vector<Adapter>& adapters, const LoraConfig& cfg);

  bool empty() const { return adapters_.empty(); }
  std::size_t count() const { return adapters_.size(); }
  int rank() const { return rank_; }
  bool dropout() const { return p_ > 0; }
  bool fused() const { return fused_; }  // dropout through the fused products (above)
  bool covers_output() const { return covers_; }
  bool writes_input_grad() const { return fused_ || p_ == 0; }
  // The workspace LinearEnv::lora_ws must hold for `rows` rows: the fused dA's or lora_out_grad's partial sums, or xd
  // [rows, in].
  std::size_t workspace_bytes(std::int64_t rows) const;
  // Elements between two adapters' z in LinearSaved::lora_z (each a 256-byte aligned piece of rows x r), and its bytes.
  std::size_t z_stride(std::int64_t rows) const;
  std::size_t saved_bytes(std::int64_t rows) const { return count() * z_stride(rows) * sizeof(bf16); }

  // y += the adapters' product of x (rows of the linear's input, as above; write: y's blocks = it); z kept in s.
  void forward(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t rows,
               bool write = false) const;
  // The backward in two halves: input_grad (dz into the scratch, with dB where one read of dy gives both; then dx +=
  // or, write, dx =) and weight_grads (dA, and dB where input_grad did not write it, reading the dz input_grad left), so
  // the linear may start dx's reduce-scatter between them. dx may not alias x.
  void input_grad(const LinearEnv& e, bf16* dx, const bf16* dy, const LinearSaved& s, std::int64_t rows,
                  bool write = false) const;
  void weight_grads(const LinearEnv& e, const bf16* dy, const bf16* x, const LinearSaved& s, std::int64_t rows) const;
  // Both for a dx that aliases x (an MLP's dg over g): the weight gradients first, while x is still there; dgrad (the
  // linear's) between the halves: it writes dx, or with `write` runs after LoRA has written it and accumulates.
  template <class F>
  void backward_over_input(const LinearEnv& e, bf16* dx, const bf16* dy, const bf16* x, const LinearSaved& s,
                           std::int64_t rows, F&& dgrad, bool write = false) const {
    dz(e, dy, s, rows);
    weight_grads(e, dy, x, s, rows);
    if (write) {
      add_input_grad(e, dx, rows, true);
      dgrad();
      return;
    }
    dgrad();
    add_input_grad(e, dx, rows, false);
  }

 private:
  struct One {
    const Slot *a, *b;
    std::int64_t row0, rows;
    std::uint64_t seed;  // its dropout stream's (slot_seed of the run's seed and A's name)
  };
  void dz(const LinearEnv& e, const bf16* dy, const LinearSaved& s, std::int64_t rows) const;  // (and dB, fused)
  void add_input_grad(const LinearEnv& e, bf16* dx, std::int64_t rows, bool write) const;
  // Adapter k's dropout mask on this rank's rows and input columns (a row-parallel rank's start at tp rank · in).
  ops::LoraMask mask(const LinearEnv& e, const One& k) const;
  // xd of adapter k into the workspace (p > 0), or x itself.
  const bf16* dropped(const LinearEnv& e, const One& k, const bf16* x, std::int64_t rows) const;
  // The fused products' view of the adapters, with z_k (or dz_k) at z + k · z_stride(rows).
  ops::LoraGroup group(const LinearEnv& e, bf16* z, std::int64_t rows) const;
  // lora_out_grad's view of the adapters (e null: their shapes only).
  ops::LoraOutputs outputs(const LinearEnv* e, const LinearSaved* s, std::int64_t rows) const;

  std::vector<One> adapters_;
  int rank_ = 0;
  float p_ = 0, scale_ = 1;
  std::int64_t in_ = 0, out_ = 0;
  bool row_parallel_ = false, fused_ = false, covers_ = false, out_fused_ = false;
};

}  // namespace tb::model
