// parallel/decoder_cpu_parallel_lora.cpp: LoRA's adapters in the sharded CPU decoder (model/lora.h has the math,
// ops/cpu/lora.h the op). An adapter runs after its linear on the same input x [n, in] (this rank's columns of a
// row-parallel linear) and adds into the same output (a row-parallel linear's partial sums, reduced with them); its
// backward adds into the linear's input gradient the same way. Per adapter of block [row0, row0 + rows):
//   forward   xd = dropout(x);  z = xd A^T;  y[:, row0 : row0 + rows] += s · z B^T          (xd kept only with p > 0)
//   backward  dz = s · dy_block B;  dB += s · dy_block^T z;  dA += dz^T xd;  dx += dropout'(dz A)
// The mask is keyed by each row's token index in the step's global batch and the full input column (a row-parallel
// rank's columns start at tp_rank · in), so every layout draws the single rank's mask.
#include <span>
#include <vector>

#include "core/counter_rng.h"
#include "model/decoder_common.h"
#include "ops/cpu/lora.h"
#include "parallel/decoder_cpu_parallel.h"
#include "parallel/decoder_cpu_parallel_state.h"

namespace tb::parallel {
namespace {

namespace cpu = tb::ops::cpu;
using model::detail::mat;

// The adapters of the linear in `slot` start at this index of the layer's adapters (qkv's, out's, fc1's, fc2's).
std::size_t first_adapter(const model::DenseLayout::Layer& L, int slot) {
  std::size_t at = 0;
  for (int s : {L.qkv, L.out, L.fc1, L.fc2}) {
    if (s == slot) return at;
    at += L.lora(s).size();
  }
  return at;
}

// The dropout mask of adapter ad of the linear in `slot` (of layout L) on x [*, in] (a row-parallel linear's x: this tp
// rank's columns of tp · in).
cpu::DropoutMask mask(const model::LoraConfig& lora, const model::DenseLayout& L, int slot, const model::Adapter& ad,
                      std::span<const std::int64_t> tokens, std::int64_t step, const comm::Communicator& tp,
                      std::int64_t in) {
  const bool row_parallel = L.slots[std::size_t(slot)].tags.tp == model::TpRole::row;
  return {step_stream(model::slot_seed(lora.seed, L.slots[std::size_t(ad.a)].name), std::uint64_t(step)), tokens,
          row_parallel ? tp.rank() * in : 0, row_parallel ? tp.size() * in : in, lora.dropout};
}

// Columns [col0, col0 + cols) of a [rows, *] view.
template <class T>
TensorView<T> columns(TensorView<T> v, std::int64_t col0, std::int64_t cols) {
  return TensorView<T>(v.data() + col0, Shape{v.size(0), cols}, Shape{v.stride(0), 1}, 2);
}

}  // namespace

template <class T>
void ShardedCpuDecoder<T>::lora_forward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, int slot,
                                        CView x, View y) {
  const std::vector<model::Adapter>& adapters = L.lora(slot);
  if (adapters.empty()) return;
  A.lora.resize(first_adapter(L, -1));
  const std::int64_t n = x.size(0), in = x.size(1), r = cfg_.lora.rank;
  for (std::size_t k = 0; k < adapters.size(); ++k) {
    const model::Adapter& ad = adapters[k];
    typename LayerActs::Lora& st = A.lora[first_adapter(L, slot) + k];
    const cpu::DropoutMask m = mask(cfg_.lora, local_, slot, ad, s.token_index, s.step, tp_, in);
    CView xd = x;
    if (m.p > 0) {
      const View dropped = mat(st.xd, n, in);
      cpu::lora_dropout_forward<T>(dropped, x, m);
      xd = dropped;
    }
    cpu::lora_forward<T>(columns(y, ad.row0, ad.rows), mat(st.z, n, r), xd, P(ad.a), P(ad.b), cfg_.lora.scale());
  }
}

template <class T>
void ShardedCpuDecoder<T>::lora_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, int slot,
                                         CView x, CView dy, View dx) {
  const std::vector<model::Adapter>& adapters = L.lora(slot);
  const std::int64_t n = x.size(0), in = x.size(1), r = cfg_.lora.rank;
  for (std::size_t k = 0; k < adapters.size(); ++k) {
    const model::Adapter& ad = adapters[k];
    typename LayerActs::Lora& st = A.lora[first_adapter(L, slot) + k];
    const cpu::DropoutMask m = mask(cfg_.lora, local_, slot, ad, s.token_index, s.step, tp_, in);
    const View dxd = mat(scratch_->lora_dxd, n, in);
    const CView xd = m.p > 0 ? CView(st.xd.data(), {n, in}) : x;
    cpu::lora_backward<T>(dxd, G(ad.a), G(ad.b), columns(dy, ad.row0, ad.rows), xd, CView(st.z.data(), {n, r}),
                          P(ad.a), P(ad.b), cfg_.lora.scale());
    cpu::lora_dropout_backward<T>(dx, dxd, m);
  }
}

#define TB_INSTANTIATE(T)                                                                                        \
  template void ShardedCpuDecoder<T>::lora_forward(const State&, const model::DenseLayout::Layer&, LayerActs&, int, \
                                                   CView, View);                                                \
  template void ShardedCpuDecoder<T>::lora_backward(const State&, const model::DenseLayout::Layer&, LayerActs&, int, \
                                                    CView, CView, View);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::parallel
