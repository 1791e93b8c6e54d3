// ops/cuda/attention_fp8.cpp: see attention_fp8.h. The graphs are attention.cpp's with FP8 tensors and the scale
// and amax scalars: every scalar is a device float {1, 1, 1, 1} tensor, the variant pack binds it to the caller's
// pointer. q, k, v, o are described through ops/cuda/attention_graph.h, as the bf16 graphs are (strides in elements,
// 1 byte each).
#include "ops/cuda/attention_fp8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/cuda/attention_graph.h"
#include "ops/cuda/cudnn_graph.h"

namespace fe = cudnn_frontend;

namespace tb::ops {
namespace {

using namespace sdpa;

constexpr std::int64_t kStrideAlign = 16;  // elements: 16 bytes at 1 byte each (cuDNN's vector loads)

fe::DataType_t fe_type(DType t) { return t == DType::e5m2 ? fe::DataType_t::FP8_E5M2 : fe::DataType_t::FP8_E4M3; }

TensorPtr scalar(Graph& g, const char* name, Uid uid) {
  return tensor(g, name, uid, {1, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::FLOAT);
}
void scalar_output(const TensorPtr& t, Uid uid) { output(t, uid, {1, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::FLOAT); }

}  // namespace

// ---- shapes ------------------------------------------------------------------------------------------

Fp8AttentionShape fp8_fused_qkv_attention(std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                          std::int64_t kv_heads, std::int64_t head_dim, DType grad) {
  return {fused_qkv_attention(batch, seq, heads, kv_heads, head_dim), grad};
}

QkvPointers split_fused_qkv_fp8(void* qkv, const AttentionShape& s) {
  auto* base = static_cast<unsigned char*>(qkv);  // 1 byte per element
  return {base, base + s.heads * s.head_dim, base + (s.heads + s.kv_heads) * s.head_dim};
}

void check_fp8_attention_shape(const Fp8AttentionShape& f) {
  const AttentionShape& s = f.attn;
  check_attention_shape(s);
  const std::string what = "attention " + describe(f);
  TB_REQUIRE(f.grad == DType::e5m2 || f.grad == DType::e4m3,
             fmt::format("{}: the gradient format must be e5m2 or e4m3, got {}", what, dtype_name(f.grad)));
  TB_REQUIRE(s.keys() == s.seq,
             fmt::format("{}: kv_seq ({}) must be 0 or seq: cuDNN's FP8 attention has no bottom-right causal mask on "
                         "Hopper (context parallelism needs the bf16 attention)",
                         what, s.kv_seq));
  TB_REQUIRE(!s.deterministic,
             what + ": cudnn-frontend 1.16 has no deterministic FP8 attention backward (use the bf16 attention)");
  TB_REQUIRE(s.segments == 0, what + ": packed sequences run on the bf16 attention only");
  TB_REQUIRE(s.v_dim() == s.head_dim,
             what + ": FP8 attention takes one head_dim for q, k and v (different v widths, as multi-head latent "
                    "attention's, run in bf16)");
  for (const auto& [name, t] : {std::pair{"q", s.q}, std::pair{"k", s.k}, std::pair{"v", s.v}, std::pair{"o", s.o}})
    TB_REQUIRE(t.batch % kStrideAlign == 0 && t.seq % kStrideAlign == 0 && t.head % kStrideAlign == 0,
               fmt::format("{}: {} strides (batch {}, seq {}, head {}) must be multiples of {} elements (16-byte "
                           "aligned FP8 rows)",
                           what, name, t.batch, t.seq, t.head, kStrideAlign));
}

std::string describe(const Fp8AttentionShape& s) {
  return fmt::format("fp8 {} grad {}", describe(s.attn), dtype_name(s.grad));
}

// ---- plan --------------------------------------------------------------------------------------------

struct Fp8AttentionPlan::Graphs : GraphPair {};

Fp8AttentionPlan::Fp8AttentionPlan(cudnnHandle_t handle, const Fp8AttentionShape& shape)
    : s_(shape), g_(std::make_unique<Graphs>()) {
  check_fp8_attention_shape(shape);
  const AttentionShape& s = shape.attn;
  const fe::DataType_t e4m3 = fe::DataType_t::FP8_E4M3, grad = fe_type(shape.grad);
  const char* direction = "forward";
  try {
    // Forward: O (E4M3), Stats (lse), Amax_S, Amax_O from Q, K, V (E4M3) and the scalars; causal, top left.
    g_->fwd = new_graph(fe::DataType_t::FP8_E4M3);
    Graph& f = *g_->fwd;
    auto q = tensor(f, "Q", kQ, dims(s, s.heads), strides(s.q), e4m3);
    auto k = tensor(f, "K", kK, dims(s, s.kv_heads), strides(s.k), e4m3);
    auto v = tensor(f, "V", kV, dims(s, s.kv_heads), strides(s.v), e4m3);
    auto fwd_opts = fe::graph::SDPA_fp8_attributes()
                        .set_name("sdpa_fp8_forward")
                        .set_generate_stats(true)
                        .set_attn_scale(attn_scale(s))
                        .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                        .set_diagonal_band_right_bound(0);
    auto [o, stats, amax_s, amax_o] =
        f.sdpa_fp8(q, k, v, scalar(f, "Descale_Q", kDescaleQ), scalar(f, "Descale_K", kDescaleK),
                   scalar(f, "Descale_V", kDescaleV), scalar(f, "Descale_S", kDescaleS),
                   scalar(f, "Scale_S", kScaleS), scalar(f, "Scale_O", kScaleO), fwd_opts);
    output(o, kO, dims(s, s.heads), strides(s.o), e4m3);
    output(stats, kStats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
    scalar_output(amax_s, kAmaxS);
    scalar_output(amax_o, kAmaxO);
    build_graph(f, handle, g_->fwd_ws, g_->fwd_engine);

    // Backward: dQ, dK, dV (grad format, through the strides of Q, K, V) and their amaxes, Amax_dP, from Q, K, V,
    // O (E4M3), dO (grad format), Stats and the scalars.
    direction = "backward";
    g_->bwd = new_graph(fe::DataType_t::FP8_E4M3);
    Graph& b = *g_->bwd;
    auto bq = tensor(b, "Q", kQ, dims(s, s.heads), strides(s.q), e4m3);
    auto bk = tensor(b, "K", kK, dims(s, s.kv_heads), strides(s.k), e4m3);
    auto bv = tensor(b, "V", kV, dims(s, s.kv_heads), strides(s.v), e4m3);
    auto bo = tensor(b, "O", kO, dims(s, s.heads), strides(s.o), e4m3);
    auto bdo = tensor(b, "dO", kDout, dims(s, s.heads), strides(s.o), grad);
    auto bstats = tensor(b, "Stats", kStats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
    auto bwd_opts = fe::graph::SDPA_fp8_backward_attributes()
                        .set_name("sdpa_fp8_backward")
                        .set_causal_mask(true)
                        .set_attn_scale(attn_scale(s));
    auto [dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp] = b.sdpa_fp8_backward(
        bq, bk, bv, bo, bdo, bstats, scalar(b, "Descale_Q", kDescaleQ), scalar(b, "Descale_K", kDescaleK),
        scalar(b, "Descale_V", kDescaleV), scalar(b, "Descale_O", kDescaleO), scalar(b, "Descale_dO", kDescaleDout),
        scalar(b, "Descale_S", kDescaleS), scalar(b, "Descale_dP", kDescaleDp), scalar(b, "Scale_S", kScaleS),
        scalar(b, "Scale_dQ", kScaleDq), scalar(b, "Scale_dK", kScaleDk), scalar(b, "Scale_dV", kScaleDv),
        scalar(b, "Scale_dP", kScaleDp), bwd_opts);
    output(dq, kDq, dims(s, s.heads), strides(s.q), grad);
    output(dk, kDk, dims(s, s.kv_heads), strides(s.k), grad);
    output(dv, kDv, dims(s, s.kv_heads), strides(s.v), grad);
    scalar_output(amax_dq, kAmaxDq);
    scalar_output(amax_dk, kAmaxDk);
    scalar_output(amax_dv, kAmaxDv);
    scalar_output(amax_dp, kAmaxDp);
    build_graph(b, handle, g_->bwd_ws, g_->bwd_engine);
  } catch (...) {  // say which shape and direction
    rethrow_graph_error(fmt::format("attention {} {}", direction, ops::describe(shape)));
  }
}

Fp8AttentionPlan::~Fp8AttentionPlan() = default;
Fp8AttentionPlan::Fp8AttentionPlan(Fp8AttentionPlan&&) noexcept = default;
Fp8AttentionPlan& Fp8AttentionPlan::operator=(Fp8AttentionPlan&&) noexcept = default;

std::size_t Fp8AttentionPlan::forward_workspace_bytes() const { return std::size_t(g_->fwd_ws); }
std::size_t Fp8AttentionPlan::backward_workspace_bytes() const { return std::size_t(g_->bwd_ws); }
std::size_t Fp8AttentionPlan::workspace_bytes() const {
  return std::max(forward_workspace_bytes(), backward_workspace_bytes());
}

std::string Fp8AttentionPlan::describe() const {
  return g_->describe("attention " + ops::describe(s_));
}

void Fp8AttentionPlan::forward(cudnnHandle_t handle, const Fp8AttentionForwardArgs& a, Workspace ws,
                               cudaStream_t stream) const {
  const PointerCheck<Fp8AttentionShape> c{s_, "forward"};
  c.data({{a.q.data, "q"}, {a.k.data, "k"}, {a.v.data, "v"}, {a.o.data, "o"}, {a.lse, "lse"}});
  c.scalars({{a.q.descale, "q descale"}, {a.k.descale, "k descale"}, {a.v.descale, "v descale"},
             {a.o.scale, "o scale"}, {a.o.amax, "o amax"},
             {a.s.scale, "P scale"}, {a.s.descale, "P descale"}, {a.s.amax, "P amax"}});
  c.workspace(ws, forward_workspace_bytes());
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, mut(a.q.data)},           {kK, mut(a.k.data)},           {kV, mut(a.v.data)},
      {kDescaleQ, mut(a.q.descale)}, {kDescaleK, mut(a.k.descale)}, {kDescaleV, mut(a.v.descale)},
      {kO, a.o.data},                {kScaleO, mut(a.o.scale)},     {kAmaxO, a.o.amax},
      {kStats, a.lse},               {kScaleS, mut(a.s.scale)},     {kDescaleS, mut(a.s.descale)},
      {kAmaxS, a.s.amax}};
  TB_CHECK(cudnnSetStream(handle, stream));
  TB_CHECK(g_->fwd->execute(handle, pack, ws.ptr));
}

void Fp8AttentionPlan::backward(cudnnHandle_t handle, const Fp8AttentionBackwardArgs& a, Workspace ws,
                                cudaStream_t stream) const {
  const PointerCheck<Fp8AttentionShape> c{s_, "backward"};
  c.data({{a.q.data, "q"}, {a.k.data, "k"}, {a.v.data, "v"}, {a.o.data, "o"}, {a.dout.data, "dout"},
          {a.lse, "lse"}, {a.dq.data, "dq"}, {a.dk.data, "dk"}, {a.dv.data, "dv"}});
  c.scalars({{a.q.descale, "q descale"}, {a.k.descale, "k descale"}, {a.v.descale, "v descale"},
             {a.o.descale, "o descale"}, {a.dout.descale, "dout descale"},
             {a.s.scale, "P scale"}, {a.s.descale, "P descale"},
             {a.dp.scale, "dP scale"}, {a.dp.descale, "dP descale"}, {a.dp.amax, "dP amax"},
             {a.dq.scale, "dq scale"}, {a.dk.scale, "dk scale"}, {a.dv.scale, "dv scale"},
             {a.dq.amax, "dq amax"}, {a.dk.amax, "dk amax"}, {a.dv.amax, "dv amax"}});
  c.workspace(ws, backward_workspace_bytes());
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, mut(a.q.data)},
      {kK, mut(a.k.data)},
      {kV, mut(a.v.data)},
      {kO, mut(a.o.data)},
      {kDout, mut(a.dout.data)},
      {kStats, mut(a.lse)},
      {kDescaleQ, mut(a.q.descale)},
      {kDescaleK, mut(a.k.descale)},
      {kDescaleV, mut(a.v.descale)},
      {kDescaleO, mut(a.o.descale)},
      {kDescaleDout, mut(a.dout.descale)},
      {kScaleS, mut(a.s.scale)},
      {kDescaleS, mut(a.s.descale)},
      {kScaleDp, mut(a.dp.scale)},
      {kDescaleDp, mut(a.dp.descale)},
      {kAmaxDp, a.dp.amax},
      {kDq, a.dq.data},
      {kDk, a.dk.data},
      {kDv, a.dv.data},
      {kScaleDq, mut(a.dq.scale)},
      {kScaleDk, mut(a.dk.scale)},
      {kScaleDv, mut(a.dv.scale)},
      {kAmaxDq, a.dq.amax},
      {kAmaxDk, a.dk.amax},
      {kAmaxDv, a.dv.amax}};
  TB_CHECK(cudnnSetStream(handle, stream));
  TB_CHECK(g_->bwd->execute(handle, pack, ws.ptr));
}

}  // namespace tb::ops
