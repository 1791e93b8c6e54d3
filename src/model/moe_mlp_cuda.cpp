// model/moe_mlp_cuda.cpp: the Mixture-of-Experts MLP of a CUDA decoder block (model/moe_mlp_cuda.h has the data flow).
#include "model/moe_mlp_cuda.h"

#include <cuda_runtime_api.h>

#include <span>

#include "core/error.h"
#include "ops/cuda/gemm.h"

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
  for (int e = 0; e < moe_.experts; ++e) {
    fc1_.emplace_back(layout, layer.expert_fc1[std::size_t(e)]);
    fc2_.emplace_back(layout, layer.expert_fc2[std::size_t(e)]);
  }
  if (layer.shared_fc1 >= 0) {  // the shared experts: a dense MLP over their slots
    DenseLayout::Layer shared = layer;
    shared.fc1 = layer.shared_fc1, shared.fc2 = layer.shared_fc2;
    shared_ = std::make_unique<DenseMlpCuda>(cfg, layout, shared);
  }
}

std::vector<LinearCuda*> MoeMlpCuda::linears() {
  std::vector<LinearCuda*> out;
  for (std::size_t e = 0; e < fc1_.size(); ++e) out.push_back(&fc1_[e]), out.push_back(&fc2_[e]);
  if (shared_)
    for (LinearCuda* l : shared_->linears()) out.push_back(l);
  return out;
}

LinearSaved& MoeMlpCuda::saved(int set, int k) {
  const int routed = 2 * moe_.experts;
  if (k >= routed) return shared_->saved(set, k - routed);
  return sets_[std::size_t(set)].lin;
}

ops::MoeRouting MoeMlpCuda::routing(std::int64_t rows, int seq) const {
  ops::MoeRouting r;
  r.tokens = int(rows), r.experts = moe_.experts, r.k = moe_.top_k, r.seq = seq;
  r.score = moe_.score == RouterScore::softmax ? ops::MoeScore::softmax : ops::MoeScore::sigmoid;
  r.normalize = moe_.normalize, r.scale = float(moe_.scale), r.balanced = moe_.routing == Routing::balanced;
  return r;
}

void MoeMlpCuda::plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int seq,
                      const RecomputePolicy& p) {
  TB_REQUIRE(!p.fp8, "CUDA decoder: a Mixture-of-Experts layer runs in BF16 only so far (drop --precision fp8)");
  sets_.resize(std::size_t(sets));
  shared_sets_.resize(std::size_t(sets));
  const std::span<Saved> all(sets_);
  const std::span<Shared> scratch(shared_sets_);
  const ops::MoeRouting r = routing(rows, seq);
  const auto n = std::size_t(rows), E = std::size_t(r.experts), nk = n * std::size_t(r.k);
  const auto R = std::size_t(r.rows()), d = std::size_t(d_), seqs = std::size_t(r.sequences());
  const bool state = p.keeps_state();
  plan_field(a, pass, all, &Saved::logits, n * E, state);
  plan_field(a, pass, all, &Saved::expert, nk, state);
  plan_field(a, pass, all, &Saved::weight, nk, state);
  plan_field(a, pass, all, &Saved::seq_counts, seqs * E, state);
  plan_field(a, pass, all, &Saved::row_of_pair, nk, state);
  plan_field(a, pass, all, &Saved::start, E + 1, state);
  plan_field(a, pass, all, &Saved::xp, R * d, state);
  plan_field(a, pass, all, &Saved::h, R * std::size_t(f1_), state);
  plan_field(a, pass, all, &Saved::g, R * std::size_t(f_), p.keeps_cheap_outputs());
  plan_field(a, pass, all, &Saved::o, R * d, state);
  plan_field(a, pass, scratch, &Shared::probs, n * E, false);
  plan_field(a, pass, scratch, &Shared::lse, n, false);
  plan_field(a, pass, scratch, &Shared::dweight, nk, false);
  plan_field(a, pass, scratch, &Shared::loss_scratch, ops::moe_losses_scratch(r), false);
  plan_field(a, pass, scratch, &Shared::count, E, false);
  plan_field(a, pass, scratch, &Shared::dispatch_scratch, ops::moe_dispatch_scratch(r), false);
  plan_field(a, pass, scratch, &Shared::dlogits, n * E, false);
  if (shared_) shared_->plan(a, pass, sets, rows, seq, p);
}

// The starts and counts of the last dispatch to the host: the expert GEMMs' sizes.
void MoeMlpCuda::to_host(const MlpCall& c, Saved& S, const Shared& X) {
  const auto E = std::size_t(moe_.experts);
  cudaStream_t st = c.e.dc.stream();
  if (!pinned_) {
    void* p = nullptr;
    TB_CHECK(cudaMallocHost(&p, sizeof(std::int32_t) * (2 * E + 1)));
    pinned_ = {static_cast<std::int32_t*>(p), free_pinned};
  }
  TB_CHECK(cudaMemcpyAsync(pinned_.get(), S.start, sizeof(std::int32_t) * (E + 1), cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaMemcpyAsync(pinned_.get() + E + 1, X.count, sizeof(std::int32_t) * E, cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaStreamSynchronize(st));
  S.host_start.assign(pinned_.get(), pinned_.get() + E + 1);
  S.host_count.assign(pinned_.get() + E + 1, pinned_.get() + 2 * E + 1);
  mark(c.e, "moe counts to host");
}

void MoeMlpCuda::forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y, bool recompute_only) {
  TB_REQUIRE(x_input == LinearInput::bf16, "CUDA decoder: a MoE layer reads its input in BF16, whole");
  const LinearEnv& e = c.e;
  Saved& S = sets_[std::size_t(set)];
  const Shared& X = shared_sets_[std::size_t(set)];
  cudaStream_t st = e.dc.stream();
  const ops::MoeRouting r = routing(c.rows, c.seq);
  const int n = r.tokens, E = r.experts, k = r.k;
  S.grad_scale = c.grad_scale;
  // router, routing, dispatch
  ops::GemmShape g;
  g.m = n, g.n = E, g.k = d_, g.d = DType::f32;
  e.dc.gemm(g, S.logits, x, e.params + router_->offset);
  mark(e, "router gemm");
  ops::moe_route(r, S.logits, {S.expert, S.weight, S.seq_counts, X.probs, X.lse}, st);
  if (!recompute_only) {
    if (!stats_.get()) {
      stats_ = ops::DeviceBuffer(e.dc.device(), sizeof(double) * std::size_t(3 + E));
      reset_stats(st);
    }
    ops::moe_losses(r, S.seq_counts, X.probs, X.lse, stats_.as<double>(), X.loss_scratch, st);
  }
  ops::moe_dispatch(r, S.expert, {S.row_of_pair, S.start, X.count, X.dispatch_scratch}, st);
  mark(e, "moe route");
  to_host(c, S, X);
  ops::moe_permute(S.xp, x, S.row_of_pair, n, k, d_, st);
  mark(e, "moe permute");
  // the experts
  const std::int64_t used = S.host_start.back();
  for (int i = 0; i < E; ++i) {
    const std::int64_t r0 = S.host_start[std::size_t(i)], m = S.host_count[std::size_t(i)];
    if (m > 0) fc1_[std::size_t(i)].forward(e, S.h + r0 * f1_, S.xp + r0 * d_, S.lin, m);
  }
  ops::activation_forward(act_, {S.g, {used, f_}}, {S.h, {used, f1_}}, st);
  mark(e, "activation fwd");
  for (int i = 0; i < E; ++i) {
    const std::int64_t r0 = S.host_start[std::size_t(i)], m = S.host_count[std::size_t(i)];
    if (m > 0) fc2_[std::size_t(i)].forward(e, S.o + r0 * d_, S.g + r0 * f_, S.lin, m);
  }
  if (shared_) shared_->forward(c, set, x, LinearInput::bf16, y, recompute_only);
  if (recompute_only) return;
  ops::moe_unpermute(y, S.o, S.row_of_pair, S.weight, n, k, d_, shared_ != nullptr, st);
  mark(e, "moe unpermute");
}

void MoeMlpCuda::zero_expert_grads(const LinearEnv& e, int expert) const {
  for (const LinearCuda* lin : {&fc1_[std::size_t(expert)], &fc2_[std::size_t(expert)]})
    TB_CHECK(cudaMemsetAsync(e.grad(lin->weight()), 0, lin->weight().size * dtype_size(e.grad_type), e.dc.stream()));
}

void MoeMlpCuda::backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                          const std::function<void()>& after_dgrad) {
  const LinearEnv& e = c.e;
  const Saved& S = sets_[std::size_t(set)];
  const Shared& X = shared_sets_[std::size_t(set)];
  cudaStream_t st = e.dc.stream();
  const ops::MoeRouting r = routing(c.rows, c.seq);
  const int n = r.tokens, E = r.experts, k = r.k;
  const std::int64_t used = S.host_start.back();
  if (c.policy.recomputes_cheap_outputs()) {
    ops::activation_forward(act_, {S.g, {used, f_}}, {S.h, {used, f1_}}, st);
    mark(e, "recompute");
  }
  ops::moe_unpermute_backward(S.o, X.dweight, dy, S.o, S.row_of_pair, S.weight, n, k, d_, st);
  mark(e, "moe unpermute bwd");
  for (int i = 0; i < E; ++i) {  // dg over g (fc2's weight gradient reads g first)
    const std::int64_t r0 = S.host_start[std::size_t(i)], m = S.host_count[std::size_t(i)];
    if (m > 0) {
      fc2_[std::size_t(i)].backward(e, S.g + r0 * f_, S.o + r0 * d_, S.g + r0 * f_, S.lin, m);
    } else if (e.overwrite) {
      zero_expert_grads(e, i);
    }
  }
  ops::activation_backward(act_, {S.h, {used, f1_}}, {S.g, {used, f_}}, {S.h, {used, f1_}}, st);
  mark(e, "activation bwd");
  for (int i = 0; i < E; ++i) {  // dxp over xp (the weight gradient reads xp first)
    const std::int64_t r0 = S.host_start[std::size_t(i)], m = S.host_count[std::size_t(i)];
    if (m > 0) fc1_[std::size_t(i)].backward(e, S.xp + r0 * d_, S.h + r0 * f1_, S.xp + r0 * d_, S.lin, m);
  }
  if (shared_) shared_->backward(c, set, x, dy, dy_amax_ready, dx, {});
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
  std::vector<double> v(3 + E, 0.0);
  if (stats_.get()) {
    TB_CHECK(cudaMemcpyAsync(v.data(), stats_.get(), sizeof(double) * v.size(), cudaMemcpyDeviceToHost, stream));
    TB_CHECK(cudaStreamSynchronize(stream));
  }
  s.experts = moe_.experts;
  for (std::size_t i = 0; i < E; ++i) s.tokens_per_expert.push_back(std::int64_t(v[3 + i]));
  s.aux += v[0], s.seq_aux += v[1], s.z += v[2];
  s.objective += moe_.aux_loss * v[0] + moe_.seq_aux_loss * v[1] + moe_.z_loss * v[2];
}

void MoeMlpCuda::reset_stats(cudaStream_t stream) {
  if (stats_.get()) TB_CHECK(cudaMemsetAsync(stats_.get(), 0, stats_.bytes(), stream));
}

}  // namespace tb::model
