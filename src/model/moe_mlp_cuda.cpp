// model/moe_mlp_cuda.cpp: the Mixture-of-Experts MLP of a CUDA decoder block (model/moe_mlp_cuda.h has the data flow).
#include "model/moe_mlp_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "core/error.h"
#include "model/decoder_cuda.h"  // Fp8Options
#include "ops/cuda/gemm.h"
#include "ops/cuda/grouped_gemm.h"

namespace tb::model {
namespace {

void mark(const LinearEnv& e, std::string_view op) {
  if (e.mark) e.mark(op);
}

void free_pinned(std::int32_t* p) { cudaFreeHost(p); }  // error ignored: nothing useful can be done here

}  // namespace

MoeMlpCuda::MoeMlpCuda(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer)
    : moe_(cfg.moe),
      d_(cfg.d_model),
      f_(cfg.expert_ffn()),
      f1_(cfg.act == Act::swiglu ? 2 * cfg.expert_ffn() : cfg.expert_ffn()),
      router_(&layout.slots.at(std::size_t(layer.router))),
      act_(activation_kind(cfg.act)) {
  for (std::size_t e = 0; e < layer.expert_fc1.size(); ++e) {  // the held experts
    fc1_.emplace_back(layout, layer.expert_fc1[e]);
    fc2_.emplace_back(layout, layer.expert_fc2[e]);
  }
  if (layer.shared_fc1 >= 0) {  // the shared experts: a dense MLP over their slots
    DenseLayout::Layer shared = layer;
    shared.fc1 = layer.shared_fc1, shared.fc2 = layer.shared_fc2;
    shared_ = std::make_unique<DenseMlpCuda>(cfg, layout, shared);
  }
}

// The six grouped GEMMs of the held experts (plan shapes are the weights' [n, k], every layout), the weights' and
// their gradients' pointers per expert, and (padded to a capacity) every expert's padded rows on the device.
struct MoeMlpCuda::Grouped {
  ops::GroupedGemmPlan fc1, fc2, fc1_data, fc2_data, fc1_weight, fc2_weight;
  ops::GroupPointers w1, w2, dw1, dw2;
  ops::DeviceBuffer padded_rows;
  const void* params = nullptr;  // the buffers the pointers were taken from
  void* grads = nullptr;
  DType grad_type = DType::f32;
};

MoeMlpCuda::~MoeMlpCuda() = default;

std::vector<LinearCuda*> MoeMlpCuda::linears() {
  std::vector<LinearCuda*> out;
  for (std::size_t e = 0; e < fc1_.size(); ++e) out.push_back(&fc1_[e]), out.push_back(&fc2_[e]);
  if (shared_)
    for (LinearCuda* l : shared_->linears()) out.push_back(l);
  return out;
}

LinearSaved& MoeMlpCuda::saved(int set, int k) {
  const int routed = 2 * int(fc1_.size());
  if (k >= routed) return shared_->saved(set, k - routed);
  return sets_[std::size_t(set)].lin[std::size_t(k)];
}

// A held expert's rows: at most min(k, experts per held expert) pairs of each token, or its padded rows.
std::int64_t MoeMlpCuda::max_linear_rows(std::int64_t rows, int seq) const {
  const ops::MoeRouting r = routing(rows, seq);
  if (r.pad) return r.padded_rows();
  const std::int64_t most = std::int64_t(r.tokens) * std::min(r.k, r.experts / r.held_experts());
  return (most + ops::kMoeRowAlign - 1) / ops::kMoeRowAlign * ops::kMoeRowAlign;  // with its alignment rows
}

ops::MoeRouting MoeMlpCuda::routing(std::int64_t rows, int seq) const {
  TB_REQUIRE(rows % moe_.token_share == 0, "CUDA MoE layer: token_share " + std::to_string(moe_.token_share) +
                                               " must divide the micro-batch's " + std::to_string(rows) + " tokens");
  ops::MoeRouting r;
  r.tokens = int(rows / moe_.token_share), r.experts = moe_.experts, r.k = moe_.top_k;
  r.seq = moe_.token_share == 1 ? seq : int(std::gcd(std::int64_t(r.tokens), std::int64_t(seq)));
  r.held = int(fc1_.size());
  if (moe_.capacity_factor > 0) {
    r.capacity = int(std::ceil(moe_.capacity_factor * double(r.tokens) * r.k / r.experts));
    r.pad = moe_.pad_to_capacity;
  }
  r.score = moe_.score == RouterScore::softmax ? ops::MoeScore::softmax : ops::MoeScore::sigmoid;
  r.normalize = moe_.normalize, r.scale = float(moe_.scale), r.balanced = moe_.routing == Routing::balanced;
  return r;
}

void MoeMlpCuda::plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int seq,
                      const RecomputePolicy& p) {
  sets_.resize(std::size_t(sets));
  for (Saved& S : sets_) S.lin.resize(2 * fc1_.size());
  shared_sets_.resize(std::size_t(sets));
  const std::span<Saved> all(sets_);
  const std::span<Shared> scratch(shared_sets_);
  const ops::MoeRouting r = routing(rows, seq);
  const auto n = std::size_t(r.tokens), E = std::size_t(r.experts), nk = n * std::size_t(r.k);
  const auto H = std::size_t(r.held_experts());
  const auto R = std::size_t(r.rows()), d = std::size_t(d_), seqs = std::size_t(r.sequences());
  const bool state = p.keeps_state();
  plan_field(a, pass, all, &Saved::logits, n * E, state);
  plan_field(a, pass, all, &Saved::expert, nk, state);
  plan_field(a, pass, all, &Saved::weight, nk, state);
  plan_field(a, pass, all, &Saved::seq_counts, seqs * E, state);
  plan_field(a, pass, all, &Saved::row_of_pair, nk, state);
  plan_field(a, pass, all, &Saved::start, H + 1, state);
  plan_field(a, pass, all, &Saved::count, H, state);
  plan_field(a, pass, all, &Saved::xp, R * d, state);
  plan_field(a, pass, all, &Saved::h, R * std::size_t(f1_), state);
  plan_field(a, pass, all, &Saved::g, R * std::size_t(f_), p.keeps_cheap_outputs());
  plan_field(a, pass, all, &Saved::o, R * d, state);
  if (p.fp8) {
    plan_field(a, pass, all, &Saved::xt1, R * d, state);
    plan_field(a, pass, all, &Saved::xt2, R * std::size_t(f_), state);
  }
  plan_field(a, pass, scratch, &Shared::probs, n * E, false);
  plan_field(a, pass, scratch, &Shared::lse, n, false);
  plan_field(a, pass, scratch, &Shared::dweight, nk, false);
  plan_field(a, pass, scratch, &Shared::loss_scratch, ops::moe_losses_scratch(r), false);
  plan_field(a, pass, scratch, &Shared::dispatch_scratch, ops::moe_dispatch_scratch(r), false);
  plan_field(a, pass, scratch, &Shared::dlogits, n * E, false);
  if (shared_) shared_->plan(a, pass, sets, rows, seq, p);
}

// The starts and counts of the last dispatch to the host: the expert GEMMs' sizes (padded: every row of the expert's).
void MoeMlpCuda::to_host(const MlpCall& c, Saved& S, bool padded) {
  const auto E = fc1_.size();
  cudaStream_t st = c.e.dc.stream();
  if (!pinned_) {
    void* p = nullptr;
    TB_CHECK(cudaMallocHost(&p, sizeof(std::int32_t) * (2 * E + 1)));
    pinned_ = {static_cast<std::int32_t*>(p), free_pinned};
  }
  TB_CHECK(cudaMemcpyAsync(pinned_.get(), S.start, sizeof(std::int32_t) * (E + 1), cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaMemcpyAsync(pinned_.get() + E + 1, S.count, sizeof(std::int32_t) * E, cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaStreamSynchronize(st));
  S.host_start.assign(pinned_.get(), pinned_.get() + E + 1);
  S.host_rows.assign(pinned_.get() + E + 1, pinned_.get() + 2 * E + 1);
  if (padded)
    for (std::size_t i = 0; i < E; ++i) S.host_rows[i] = S.host_start[i + 1] - S.host_start[i];
  mark(c.e, "moe counts to host");
}

void MoeMlpCuda::forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y, bool recompute_only) {
  TB_REQUIRE(x_input == LinearInput::bf16, "CUDA decoder: a MoE layer reads its input in BF16, whole");
  const LinearEnv& e = c.e;
  Saved& S = sets_[std::size_t(set)];
  const Shared& X = shared_sets_[std::size_t(set)];
  cudaStream_t st = e.dc.stream();
  ops::MoeRouting r = routing(c.rows, c.seq);
  const int n = r.tokens, E = r.experts, H = r.held_experts(), k = r.k;
  S.grad_scale = c.grad_scale;
  // router, routing, dispatch
  if (moe_.bias_update_rate > 0 && !bias_.get()) {  // (the first forward, before any graph capture)
    bias_ = ops::DeviceBuffer(e.dc.device(), sizeof(float) * std::size_t(2 * E));
    TB_CHECK(cudaMemsetAsync(bias_.get(), 0, bias_.bytes(), st));
  }
  r.bias = bias_.get() ? bias_.as<float>() : nullptr;
  ops::GemmShape g;
  g.m = n, g.n = E, g.k = d_, g.d = DType::f32;
  e.dc.gemm(g, S.logits, x, e.params + router_->offset);
  mark(e, "router gemm");
  ops::moe_route(r, S.logits, {S.expert, S.weight, S.seq_counts, X.probs, X.lse}, st);
  if (!recompute_only) {
    if (!stats_.get()) {
      stats_ = ops::DeviceBuffer(e.dc.device(), sizeof(double) * std::size_t(4 + E));
      reset_stats(st);
    }
    ops::moe_losses(r, S.seq_counts, X.probs, X.lse, stats_.as<double>(), X.loss_scratch, st,
                    bias_.get() ? bias_.as<float>() + E : nullptr);
  }
  double* dropped = recompute_only ? nullptr : stats_.as<double>() + 3 + E;
  ops::moe_dispatch(r, S.expert, S.weight, {S.row_of_pair, S.start, S.count, X.dispatch_scratch, dropped}, st);
  mark(e, "moe route");
  const bool padded = r.pad || e.fp8.enabled;  // FP8 GEMMs take rows in multiples of 16: the aligned rows
  if (e.fp8.enabled) to_host(c, S, padded);
  ops::moe_permute(S.xp, x, S.row_of_pair, n, k, d_, st);
  if (padded) ops::moe_zero_padding(S.xp, S.start, S.count, H, d_, st);
  mark(e, "moe permute");
  if (e.fp8.enabled)
    experts_forward_linear(e, S);
  else
    experts_forward_grouped(e, r, S);
  const MlpCall share{c.e, c.policy, n, r.seq, c.grad_scale};  // the rows the layer runs on
  if (shared_) shared_->forward(share, set, x, LinearInput::bf16, y, recompute_only);
  if (recompute_only) return;
  ops::moe_unpermute(y, S.o, S.row_of_pair, S.weight, n, k, d_, shared_ != nullptr, st);
  if (n < c.rows)  // a proxy's rows past its token share
    TB_CHECK(cudaMemsetAsync(y + std::int64_t(n) * d_, 0, sizeof(bf16) * std::size_t((c.rows - n) * d_), st));
  mark(e, "moe unpermute");
}

void MoeMlpCuda::zero_expert_grads(const LinearEnv& e, int expert) const {
  for (const LinearCuda* lin : {&fc1_[std::size_t(expert)], &fc2_[std::size_t(expert)]})
    TB_CHECK(cudaMemsetAsync(e.grad(lin->weight()), 0, lin->weight().size * dtype_size(e.grad_type), e.dc.stream()));
}

MoeMlpCuda::Grouped& MoeMlpCuda::grouped(const LinearEnv& e, const ops::MoeRouting& r) {
  if (grouped_ && grouped_->params == e.params && grouped_->grads == e.grads && grouped_->grad_type == e.grad_type)
    return *grouped_;
  const int dev = e.dc.device(), H = r.held_experts();
  auto plan = [&](std::int64_t n, std::int64_t k, ops::GemmLayout layout, DType d) {
    ops::GroupedGemmShape s;
    s.n = n, s.k = k, s.groups = H, s.rows = r.rows(), s.layout = layout, s.d = d;
    return ops::GroupedGemmPlan(dev, s);
  };
  auto pointers = [&](const std::vector<LinearCuda>& lins, bool grads) {
    std::vector<void*> p;
    for (const LinearCuda& l : lins)
      p.push_back(grads ? e.grad(l.weight()) : const_cast<bf16*>(e.params + l.weight().offset));
    return ops::GroupPointers(dev, p);
  };
  using ops::GemmLayout;
  grouped_ = std::make_unique<Grouped>(Grouped{
      plan(f1_, d_, GemmLayout::abt, DType::bf16), plan(d_, f_, GemmLayout::abt, DType::bf16),
      plan(f1_, d_, GemmLayout::ab, DType::bf16), plan(d_, f_, GemmLayout::ab, DType::bf16),
      plan(f1_, d_, GemmLayout::atb, e.grad_type), plan(d_, f_, GemmLayout::atb, e.grad_type), pointers(fc1_, false),
      pointers(fc2_, false), pointers(fc1_, true), pointers(fc2_, true), ops::DeviceBuffer(), e.params, e.grads,
      e.grad_type});
  if (r.pad) {  // every expert's GEMMs run on all its rows
    const std::vector<std::int32_t> rows(std::size_t(H), std::int32_t(r.padded_rows()));
    grouped_->padded_rows = ops::DeviceBuffer(dev, sizeof(std::int32_t) * rows.size());
    TB_CHECK(cudaMemcpy(grouped_->padded_rows.get(), rows.data(), grouped_->padded_rows.bytes(),
                        cudaMemcpyHostToDevice));
  }
  return *grouped_;
}

// The grouped GEMMs' rows per expert: its kept pairs, or (padded) all its rows.
const std::int32_t* MoeMlpCuda::gemm_rows(const Grouped& G, const Saved& S) const {
  return G.padded_rows.get() ? G.padded_rows.as<std::int32_t>() : S.count;
}

void MoeMlpCuda::experts_forward_grouped(const LinearEnv& e, const ops::MoeRouting& r, const Saved& S) {
  Grouped& G = grouped(e, r);
  cudaStream_t st = e.dc.stream();
  const std::int32_t* rows = gemm_rows(G, S);
  const std::int64_t R = r.rows();  // (the activation runs on every row: the counts stay on the device)
  G.fc1.run({S.start, rows, S.xp, nullptr, G.w1.in(), S.h, nullptr, nullptr, nullptr, false}, st);
  mark(e, "gemm fwd");
  ops::activation_forward(act_, {S.g, {R, f_}}, {S.h, {R, f1_}}, st);
  mark(e, "activation fwd");
  G.fc2.run({S.start, rows, S.g, nullptr, G.w2.in(), S.o, nullptr, nullptr, nullptr, false}, st);
  mark(e, "gemm fwd");
}

void MoeMlpCuda::experts_forward_linear(const LinearEnv& e, Saved& S) {
  const std::int64_t used = S.host_start.back();
  for (std::size_t i = 0; i < fc1_.size(); ++i) {
    const std::int64_t r0 = S.host_start[i], m = S.host_rows[i];
    LinearSaved &s1 = S.lin[2 * i], &s2 = S.lin[2 * i + 1];
    if (S.xt1) s1.xt = S.xt1 + r0 * d_, s2.xt = S.xt2 + r0 * f_;  // FP8: X^T [in, m] at the expert's rows
    if (m > 0) fc1_[i].forward(e, S.h + r0 * f1_, S.xp + r0 * d_, s1, m);
  }
  ops::activation_forward(act_, {S.g, {used, f_}}, {S.h, {used, f1_}}, e.dc.stream());
  mark(e, "activation fwd");
  for (std::size_t i = 0; i < fc2_.size(); ++i) {
    const std::int64_t r0 = S.host_start[i], m = S.host_rows[i];
    if (m > 0) fc2_[i].forward(e, S.o + r0 * d_, S.g + r0 * f_, S.lin[2 * i + 1], m);
  }
}

// Weight gradients first: each reads the buffer its data gradient then overwrites (g, xp).
void MoeMlpCuda::experts_backward_grouped(const LinearEnv& e, const ops::MoeRouting& r, const Saved& S) {
  Grouped& G = grouped(e, r);
  cudaStream_t st = e.dc.stream();
  const std::int32_t* rows = gemm_rows(G, S);
  const std::int64_t R = r.rows();
  const bool acc = !e.overwrite;  // (overwriting, an expert without rows gets zeros)
  G.fc2_weight.run({S.start, rows, S.o, S.g, nullptr, nullptr, G.dw2.out(), nullptr, nullptr, acc}, st);
  mark(e, "gemm wgrad");
  G.fc2_data.run({S.start, rows, S.o, nullptr, G.w2.in(), S.g, nullptr, nullptr, nullptr, false}, st);
  mark(e, "gemm dgrad");
  ops::activation_backward(act_, {S.h, {R, f1_}}, {S.g, {R, f_}}, {S.h, {R, f1_}}, st);
  mark(e, "activation bwd");
  G.fc1_weight.run({S.start, rows, S.h, S.xp, nullptr, nullptr, G.dw1.out(), nullptr, nullptr, acc}, st);
  mark(e, "gemm wgrad");
  G.fc1_data.run({S.start, rows, S.h, nullptr, G.w1.in(), S.xp, nullptr, nullptr, nullptr, false}, st);
  mark(e, "gemm dgrad");
}

void MoeMlpCuda::experts_backward_linear(const LinearEnv& e, const Saved& S) {
  const std::int64_t used = S.host_start.back();
  for (std::size_t i = 0; i < fc2_.size(); ++i) {  // dg over g (fc2's weight gradient reads g first)
    const std::int64_t r0 = S.host_start[i], m = S.host_rows[i];
    if (m > 0) {
      fc2_[i].backward(e, S.g + r0 * f_, S.o + r0 * d_, S.g + r0 * f_, S.lin[2 * i + 1], m);
    } else if (e.overwrite) {
      zero_expert_grads(e, int(i));
    }
  }
  ops::activation_backward(act_, {S.h, {used, f1_}}, {S.g, {used, f_}}, {S.h, {used, f1_}}, e.dc.stream());
  mark(e, "activation bwd");
  for (std::size_t i = 0; i < fc1_.size(); ++i) {  // dxp over xp (the weight gradient reads xp first)
    const std::int64_t r0 = S.host_start[i], m = S.host_rows[i];
    if (m > 0) fc1_[i].backward(e, S.xp + r0 * d_, S.h + r0 * f1_, S.xp + r0 * d_, S.lin[2 * i], m);
  }
}

void MoeMlpCuda::backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                          const std::function<void()>& after_dgrad) {
  const LinearEnv& e = c.e;
  const Saved& S = sets_[std::size_t(set)];
  const Shared& X = shared_sets_[std::size_t(set)];
  cudaStream_t st = e.dc.stream();
  const ops::MoeRouting r = routing(c.rows, c.seq);
  const int n = r.tokens, E = r.experts, H = r.held_experts(), k = r.k;
  if (c.policy.recomputes_cheap_outputs()) {  // (BF16 only: the grouped GEMMs' rows, every row)
    const std::int64_t R = r.rows();
    ops::activation_forward(act_, {S.g, {R, f_}}, {S.h, {R, f1_}}, st);
    mark(e, "recompute");
  }
  ops::moe_unpermute_backward(S.o, X.dweight, dy, S.o, S.row_of_pair, S.weight, n, k, d_, st);
  if (r.pad || e.fp8.enabled) ops::moe_zero_padding(S.o, S.start, S.count, H, d_, st);
  mark(e, "moe unpermute bwd");
  if (e.fp8.enabled)
    experts_backward_linear(e, S);
  else
    experts_backward_grouped(e, r, S);
  const MlpCall share{c.e, c.policy, n, r.seq, c.grad_scale};
  if (shared_) shared_->backward(share, set, x, dy, dy_amax_ready, dx, {});
  if (n < c.rows)  // a proxy's rows past its token share
    TB_CHECK(cudaMemsetAsync(dx + std::int64_t(n) * d_, 0, sizeof(bf16) * std::size_t((c.rows - n) * d_), st));
  ops::moe_permute_backward(dx, S.xp, S.row_of_pair, n, k, d_, shared_ != nullptr, st);
  mark(e, "moe permute bwd");
  // the router
  const ops::MoeLossCoeffs coeffs =
      ops::moe_loss_coefficients(r, moe_.aux_loss, moe_.seq_aux_loss, moe_.z_loss, S.grad_scale);
  ops::moe_router_backward(r, X.dlogits, S.logits, S.expert, X.dweight, S.seq_counts, coeffs, st);
  mark(e, "router bwd");
  ops::GemmShape gd;  // dx += dlogits Wr
  gd.m = n, gd.n = d_, gd.k = E, gd.layout = ops::GemmLayout::ab, gd.accumulate = true;
  e.dc.gemm(gd, dx, X.dlogits, e.params + router_->offset);
  mark(e, "gemm dgrad");
  if (after_dgrad) after_dgrad();
  ops::GemmShape gw;  // dWr (+)= dlogits^T x
  gw.m = E, gw.n = d_, gw.k = n, gw.layout = ops::GemmLayout::atb, gw.d = e.grad_type, gw.accumulate = !e.overwrite;
  e.dc.gemm(gw, e.grad(*router_), X.dlogits, x);
  mark(e, "gemm wgrad");
}

void MoeMlpCuda::add_stats(MoeStats& s, cudaStream_t stream) const {
  const auto E = std::size_t(moe_.experts);
  std::vector<double> v(4 + E, 0.0);
  if (stats_.get()) {
    TB_CHECK(cudaMemcpyAsync(v.data(), stats_.get(), sizeof(double) * v.size(), cudaMemcpyDeviceToHost, stream));
    TB_CHECK(cudaStreamSynchronize(stream));
  }
  s.experts = moe_.experts;
  for (std::size_t i = 0; i < E; ++i) s.tokens_per_expert.push_back(std::int64_t(v[3 + i]));
  s.aux += v[0], s.seq_aux += v[1], s.z += v[2];
  s.dropped += std::int64_t(v[3 + E]);
  s.objective += moe_.aux_loss * v[0] + moe_.seq_aux_loss * v[1] + moe_.z_loss * v[2];
}

void MoeMlpCuda::reset_stats(cudaStream_t stream) {
  if (stats_.get()) TB_CHECK(cudaMemsetAsync(stats_.get(), 0, stats_.bytes(), stream));
}

void MoeMlpCuda::update_expert_bias(const std::function<void(float*, std::size_t)>& sum_loads, cudaStream_t stream) {
  if (!bias_.get()) return;
  float* load = bias_.as<float>() + moe_.experts;
  if (sum_loads) sum_loads(load, std::size_t(moe_.experts));
  ops::moe_update_expert_bias(bias_.as<float>(), load, moe_.experts, float(moe_.bias_update_rate), stream);
}

void MoeMlpCuda::append_expert_bias(std::vector<float>& out, cudaStream_t stream) const {
  if (!bias_.get()) return;
  const std::size_t at = out.size();
  out.resize(at + std::size_t(moe_.experts));
  TB_CHECK(cudaMemcpyAsync(out.data() + at, bias_.get(), sizeof(float) * std::size_t(moe_.experts),
                           cudaMemcpyDeviceToHost, stream));
  TB_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace tb::model
