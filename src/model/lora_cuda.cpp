// model/lora_cuda.cpp: a CUDA linear's LoRA adapters (model/lora_cuda.h has the formulas): cuBLASLt GEMMs on the
// adapter's row block of the linear's output (leading dimension `out`), ops/cuda/lora.h's fused products for the
// dropped input's side where they take the shape; the dropout drawn again in the backward.
#include "model/lora_cuda.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/decoder_cuda.h"
#include "model/linear_cuda.h"
#include "model/param_layout.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/lora.h"

namespace tb::model {
namespace {

// A BF16 GEMM (atb: into a gradient of type `grads`, written when `overwrite`, else accumulated).
ops::GemmShape shape(std::int64_t m, std::int64_t n, std::int64_t k, ops::GemmLayout layout, bool accumulate,
                     std::int64_t lda = 0, std::int64_t ldd = 0, DType d = DType::bf16) {
  ops::GemmShape s;
  s.m = m, s.n = n, s.k = k, s.layout = layout, s.accumulate = accumulate, s.lda = lda, s.ldd = ldd, s.d = d;
  return s;
}

void mark(const LinearEnv& e, std::string_view op) {
  if (e.mark) e.mark(op);
}

}  // namespace

LoraCuda::LoraCuda(const ParamRegistry& registry, const Slot& w, const std::vector<Adapter>& adapters,
                   const LoraConfig& cfg)
    : rank_(cfg.rank), p_(float(cfg.dropout)), scale_(float(cfg.scale())), in_(w.shape[1]), out_(w.shape[0]),
      row_parallel_(w.tags.tp == TpRole::row) {
  for (const Adapter& ad : adapters) {
    const Slot &a = registry.slots.at(std::size_t(ad.a)), &b = registry.slots.at(std::size_t(ad.b));
    const std::vector<std::int64_t> a_shape = {rank_, in_}, b_shape = {ad.rows, rank_};
    TB_REQUIRE(a.shape == a_shape && b.shape == b_shape && ad.row0 + ad.rows <= out_ && a.has_grad() && b.has_grad(),
               "CUDA decoder: internal: the adapter " + a.name + " does not fit its linear " + w.name);
    adapters_.push_back({&a, &b, ad.row0, ad.rows, slot_seed(cfg.seed, a.name)});
  }
  // a row-parallel rank's columns start at a multiple of in_ (even when in_ is); A 8-byte aligned in the parameters
  fused_ = p_ > 0 && adapters_.size() <= std::size_t(ops::LoraGroup::kMax) && ops::lora_fusable(rank_, in_, 0) &&
           std::ranges::all_of(adapters_, [](const One& k) { return k.a->offset % 4 == 0; });
  std::vector<std::pair<std::int64_t, std::int64_t>> blocks;  // (row0, rows): do they tile [0, out)?
  for (const One& k : adapters_) blocks.emplace_back(k.row0, k.rows);
  std::ranges::sort(blocks);
  std::int64_t end = 0;
  for (const auto& [row0, n] : blocks) end = row0 == end ? end + n : -1;
  covers_ = end == out_;
  out_fused_ = adapters_.size() <= std::size_t(ops::LoraOutputs::kMax) &&
               std::ranges::all_of(adapters_, [&](const One& k) {
                 return ops::lora_out_fusable(rank_, k.row0, k.rows, out_);
               });
}

std::size_t LoraCuda::workspace_bytes(std::int64_t rows) const {
  std::size_t bytes = out_fused_ ? ops::lora_out_grad_workspace_bytes(outputs(nullptr, nullptr, rows), rows) : 0;
  if (fused_) return std::max(bytes, ops::lora_grad_a_workspace_bytes(rows, in_, int(count()), rank_));
  return std::max(bytes, p_ > 0 ? std::size_t(rows * in_) * sizeof(bf16) : 0);
}

ops::LoraOutputs LoraCuda::outputs(const LinearEnv* e, const LinearSaved* s, std::int64_t rows) const {
  ops::LoraOutputs g;
  g.count = int(count()), g.r = rank_;
  for (std::size_t i = 0; i < adapters_.size(); ++i) {
    const One& k = adapters_[i];
    g.col0[i] = k.row0, g.cols[i] = k.rows;
    if (!e) continue;
    g.b[i] = e->params + k.b->offset, g.grad[i] = e->grad(*k.b);
    g.z[i] = s->lora_z + i * z_stride(rows), g.dz[i] = e->lora_dz + i * z_stride(rows);
  }
  return g;
}

ops::LoraGroup LoraCuda::group(const LinearEnv& e, bf16* z, std::int64_t rows) const {
  ops::LoraGroup g;
  g.count = int(count()), g.r = rank_;
  for (std::size_t i = 0; i < adapters_.size(); ++i) {
    const One& k = adapters_[i];
    g.a[i] = e.params + k.a->offset, g.seed[i] = k.seed, g.z[i] = z + i * z_stride(rows), g.grad[i] = e.grad(*k.a);
  }
  return g;
}

std::size_t LoraCuda::z_stride(std::int64_t rows) const {
  return pad256(std::size_t(rows) * std::size_t(rank_) * sizeof(bf16)) / sizeof(bf16);
}

ops::LoraMask LoraCuda::mask(const LinearEnv& e, const One& k) const {
  ops::LoraMask m{k.seed, e.step, p_, e.rows};
  m.rows.col0 = row_parallel_ ? std::int64_t(e.tp.rank) * in_ : 0;
  m.rows.cols_full = row_parallel_ ? std::int64_t(e.tp.size) * in_ : in_;
  return m;
}

const LoraCuda::bf16* LoraCuda::dropped(const LinearEnv& e, const One& k, const bf16* x, std::int64_t rows) const {
  if (p_ == 0) return x;
  auto* xd = static_cast<bf16*>(e.lora_ws);
  ops::lora_dropout(xd, x, rows, in_, mask(e, k), e.dc.stream());
  mark(e, "lora dropout");
  return xd;
}

void LoraCuda::forward(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t rows,
                       bool write) const {
  TB_REQUIRE(!write || covers_, "CUDA decoder: internal: LoRA writes y only where its adapters cover it");
  const std::size_t stride = z_stride(rows);
  if (fused_) {
    ops::lora_down(group(e, s.lora_z, rows), x, rows, in_, mask(e, adapters_[0]), e.dc.stream());
    mark(e, "lora down fused");
  }
  for (std::size_t i = 0; i < adapters_.size(); ++i) {
    const One& k = adapters_[i];
    bf16* z = s.lora_z + i * stride;
    if (!fused_)
      e.dc.gemm(shape(rows, rank_, in_, ops::GemmLayout::abt, false), z, dropped(e, k, x, rows),
                e.params + k.a->offset);
    e.dc.gemm(shape(rows, k.rows, rank_, ops::GemmLayout::abt, !write, 0, out_), y + k.row0, z,
              e.params + k.b->offset, {}, scale_);
    mark(e, "lora gemm fwd");
  }
}

void LoraCuda::dz(const LinearEnv& e, const bf16* dy, const LinearSaved& s, std::int64_t rows) const {
  if (out_fused_) {
    ops::lora_out_grad(outputs(&e, &s, rows), dy, rows, out_, scale_, e.grad_type, e.overwrite, e.lora_ws,
                       e.dc.stream());
    mark(e, "lora out grad fused");
    return;
  }
  const std::size_t stride = z_stride(rows);
  for (std::size_t i = 0; i < adapters_.size(); ++i) {
    const One& k = adapters_[i];
    e.dc.gemm(shape(rows, rank_, k.rows, ops::GemmLayout::ab, false, out_), e.lora_dz + i * stride, dy + k.row0,
              e.params + k.b->offset);
  }
  mark(e, "lora gemm dz");
}

void LoraCuda::add_input_grad(const LinearEnv& e, bf16* dx, std::int64_t rows, bool write) const {
  TB_REQUIRE(!write || writes_input_grad(), "CUDA decoder: internal: this LoRA linear adds its input gradient");
  if (fused_) {
    ops::lora_input_grad(dx, group(e, e.lora_dz, rows), rows, in_, mask(e, adapters_[0]), scale_, !write,
                         e.dc.stream());
    mark(e, "lora dgrad fused");
    return;
  }
  const std::size_t stride = z_stride(rows);
  for (std::size_t i = 0; i < adapters_.size(); ++i) {
    const One& k = adapters_[i];
    const bf16* dzk = e.lora_dz + i * stride;
    if (p_ == 0) {
      e.dc.gemm(shape(rows, in_, rank_, ops::GemmLayout::ab, !(write && i == 0)), dx, dzk, e.params + k.a->offset, {},
                scale_);
      continue;
    }
    e.dc.gemm(shape(rows, in_, rank_, ops::GemmLayout::ab, false), e.lora_t, dzk, e.params + k.a->offset, {}, scale_);
    ops::lora_dropout_add(dx, e.lora_t, rows, in_, mask(e, k), e.dc.stream());
  }
  mark(e, "lora gemm dgrad");
}

void LoraCuda::input_grad(const LinearEnv& e, bf16* dx, const bf16* dy, const LinearSaved& s, std::int64_t rows,
                          bool write) const {
  dz(e, dy, s, rows);
  add_input_grad(e, dx, rows, write);
}

void LoraCuda::weight_grads(const LinearEnv& e, const bf16* dy, const bf16* x, const LinearSaved& s,
                            std::int64_t rows) const {
  const std::size_t stride = z_stride(rows);
  if (!out_fused_ || !fused_) {  // (B's gradients written with dz when out_fused_, A's by lora_grad_a when fused_)
    for (std::size_t i = 0; i < adapters_.size(); ++i) {
      const One& k = adapters_[i];
      if (!out_fused_)
        e.dc.gemm(shape(k.rows, rank_, rows, ops::GemmLayout::atb, !e.overwrite, out_, 0, e.grad_type), e.grad(*k.b),
                  dy + k.row0, s.lora_z + i * stride, {}, scale_);
      if (!fused_)
        e.dc.gemm(shape(rank_, in_, rows, ops::GemmLayout::atb, !e.overwrite, 0, 0, e.grad_type), e.grad(*k.a),
                  e.lora_dz + i * stride, dropped(e, k, x, rows), {}, scale_);
    }
    mark(e, "lora gemm wgrad");
  }
  if (fused_) {
    ops::lora_grad_a(group(e, e.lora_dz, rows), x, rows, in_, mask(e, adapters_[0]), scale_, e.grad_type,
                     e.overwrite, e.lora_ws, e.dc.stream());
    mark(e, "lora grad a fused");
  }
}

}  // namespace tb::model
