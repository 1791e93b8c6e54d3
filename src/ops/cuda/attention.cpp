// ops/cuda/attention.cpp: see attention.h. cudnn-frontend comes in through ops/cuda/cudnn_graph.h (with TB_CHECK on its
// errors and build_graph); the tensor descriptions, uids and pointer checks are ops/cuda/attention_graph.h's, shared
// with attention_fp8.cpp. A view into the fused QKV buffer is just a base pointer (q at column 0, k at H*d, v at
// (H+G)*d) and the row stride (H+2G)*d for seq.
#include "ops/cuda/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/cuda/attention_graph.h"
#include "ops/cuda/cudnn_graph.h"

namespace fe = cudnn_frontend;

namespace tb::ops {
namespace {

using namespace sdpa;

std::vector<std::int64_t> kv_dims(const AttentionShape& s) { return {s.batch, s.kv_heads, s.keys(), s.head_dim}; }
std::vector<std::int64_t> v_dims(const AttentionShape& s) { return {s.batch, s.kv_heads, s.keys(), s.v_dim()}; }
std::vector<std::int64_t> o_dims(const AttentionShape& s) { return {s.batch, s.heads, s.seq, s.v_dim()}; }

// The shape the graph sees: a packed shape's batch is its segment capacity (each segment a sequence of at most s).
AttentionShape graph_shape(const AttentionShape& s) {
  AttentionShape g = s;
  if (s.segments > 0) g.batch = s.segments;
  return g;
}

// lse: [b, H, s]; packed, cuDNN's ragged statistics: token-major [b s, H] (per token its H heads).
std::vector<std::int64_t> lse_strides(const AttentionShape& s) {
  if (s.segments > 0) return {s.seq * s.heads, 1, s.heads, 1};
  return stats_strides(s);
}

// A packed graph's extra inputs: the segments' lengths (for q and for k, v: the same array) and the ragged offsets
// of q, k, v, o and the statistics, int64 [segments + 1].
struct Ragged {
  TensorPtr seq_q, seq_kv, q, k, v, o, stats;
  Ragged(Graph& g, const AttentionShape& s) {
    const fe::DataType_t i32 = fe::DataType_t::INT32, i64 = fe::DataType_t::INT64;
    const std::vector<std::int64_t> one{1, 1, 1, 1};
    const auto lengths = [&](const char* n, Uid u) { return tensor(g, n, u, {s.segments, 1, 1, 1}, one, i32); };
    const auto offsets = [&](const char* n, Uid u) { return tensor(g, n, u, {s.segments + 1, 1, 1, 1}, one, i64); };
    seq_q = lengths("seq_len_q", kSeqLenQ), seq_kv = lengths("seq_len_kv", kSeqLenKv);
    q = offsets("offset_q", kOffsetQ), k = offsets("offset_k", kOffsetK), v = offsets("offset_v", kOffsetV);
    o = offsets("offset_o", kOffsetO), stats = offsets("offset_stats", kOffsetStats);
  }
};


// A packed call's tables are given (and aligned as cuDNN reads them).
void check_packed(const PointerCheck<AttentionShape>& c, const PackedSegments& p) {
  c.data({{p.seq_len, "the segment lengths"}, {p.qkv_offset, "the qkv offsets"}, {p.o_offset, "the o offsets"},
          {p.stats_offset, "the lse offsets"}});
}

// The variant pack's packed entries.
void add_packed(std::unordered_map<std::int64_t, void*>& pack, const PackedSegments& p) {
  pack[kSeqLenQ] = mut(p.seq_len), pack[kSeqLenKv] = mut(p.seq_len);
  pack[kOffsetQ] = pack[kOffsetK] = pack[kOffsetV] = mut(p.qkv_offset);
  pack[kOffsetO] = mut(p.o_offset), pack[kOffsetStats] = mut(p.stats_offset);
}

// Top left (j <= i) when queries and keys are the same positions; bottom right (j <= i + keys - seq) when the
// queries are the last seq of keys() positions. kv_seq == seq keeps the top-left graphs of the plain case.
fe::DiagonalAlignment_t diagonal(const AttentionShape& s) {
  return s.keys() == s.seq ? fe::DiagonalAlignment_t::TOP_LEFT : fe::DiagonalAlignment_t::BOTTOM_RIGHT;
}

}  // namespace

void require_packed_cudnn(const std::string& what) {
  if (int(cudnnGetVersion()) >= kCudnnPackedVersion) return;
  raise_error(Error::Kind::unsupported,
              fmt::format("{}: packed sequences need cuDNN >= 9.6.0 (grouped-query attention with ragged offsets); "
                          "this process loaded cuDNN {}: put a newer libcudnn first on the library path",
                          what, cudnn_version()));
}

// ---- shapes ------------------------------------------------------------------------------------------

AttentionShape fused_qkv_attention(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t kv_heads,
                                   std::int64_t head_dim, bool deterministic) {
  AttentionShape s;
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  const std::int64_t row = (heads + 2 * kv_heads) * head_dim;
  s.q = s.k = s.v = HeadStrides{seq * row, row, head_dim};
  s.o = HeadStrides{seq * heads * head_dim, heads * head_dim, head_dim};
  s.deterministic = deterministic;
  return s;
}

std::size_t fused_qkv_elements(const AttentionShape& s) {
  return std::size_t(s.batch * s.seq * (s.heads + 2 * s.kv_heads) * s.head_dim);
}

QkvPointers split_fused_qkv(void* qkv, const AttentionShape& s) {
  auto* base = static_cast<unsigned char*>(qkv);
  const std::size_t e = 2;  // bf16 bytes
  return {base, base + std::size_t(s.heads * s.head_dim) * e,
          base + std::size_t((s.heads + s.kv_heads) * s.head_dim) * e};
}

void check_attention_shape(const AttentionShape& s) {
  const std::string what = "attention " + describe(s);
  TB_REQUIRE(s.batch >= 1 && s.seq >= 1 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1,
             what + ": batch, seq, heads, kv_heads and head_dim must all be at least 1");
  TB_REQUIRE(s.heads % s.kv_heads == 0,
             fmt::format("{}: kv_heads ({}) must divide heads ({}) for grouped-query attention", what, s.kv_heads,
                         s.heads));
  TB_REQUIRE(s.head_dim % 8 == 0, fmt::format("{}: head_dim ({}) must be a multiple of 8 (cuDNN SDPA)", what,
                                              s.head_dim));
  TB_REQUIRE(s.v_head_dim >= 0 && s.v_dim() % 8 == 0,
             fmt::format("{}: v_head_dim ({}) must be 0 (head_dim) or a positive multiple of 8 (cuDNN SDPA)", what,
                         s.v_head_dim));
  TB_REQUIRE(s.kv_seq == 0 || s.kv_seq >= s.seq,
             fmt::format("{}: kv_seq ({}) must be 0 (same as seq) or at least seq ({}): the queries are the last "
                         "seq of kv_seq positions",
                         what, s.kv_seq, s.seq));
  TB_REQUIRE(s.segments >= 0 && (s.segments == 0 || s.keys() == s.seq),
             fmt::format("{}: segments ({}) must be >= 0, and packed rows have no longer keys (kv_seq {})", what,
                         s.segments, s.kv_seq));
  for (const auto& [name, t] : {std::pair{"q", s.q}, std::pair{"k", s.k}, std::pair{"v", s.v}, std::pair{"o", s.o}})
    TB_REQUIRE(t.batch > 0 && t.seq > 0 && t.head > 0 && t.batch % 8 == 0 && t.seq % 8 == 0 && t.head % 8 == 0,
               fmt::format("{}: {} strides (batch {}, seq {}, head {}) must be positive multiples of 8 elements "
                           "(16-byte aligned rows)",
                           what, name, t.batch, t.seq, t.head));
}

std::string describe(const AttentionShape& s) {
  std::string d = fmt::format("b={} s={}", s.batch, s.seq);
  if (s.keys() != s.seq) d += fmt::format(" kv={}", s.kv_seq);
  d += fmt::format(" H={} G={} d={}", s.heads, s.kv_heads, s.head_dim);
  if (s.v_dim() != s.head_dim) d += fmt::format(" dv={}", s.v_dim());
  const AttentionShape fused = fused_qkv_attention(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, s.deterministic);
  const bool same_v = s.v_dim() == s.head_dim;
  if (s.keys() == s.seq && same_v && s.q == fused.q && s.k == fused.k && s.v == fused.v && s.o == fused.o) {
    d += " fused-qkv";
  } else {
    auto str = [](const HeadStrides& t) { return fmt::format("{}/{}/{}", t.batch, t.seq, t.head); };
    d += fmt::format(" strides(b/s/h) q {} k {} v {} o {}", str(s.q), str(s.k), str(s.v), str(s.o));
  }
  if (s.deterministic) d += " deterministic";
  if (s.segments > 0) d += fmt::format(" packed={}", s.segments);
  return d;
}

AttentionFlops attention_flops(const AttentionShape& s, bool causal) {
  const double sq = double(s.seq), sk = double(s.keys());
  // Scores computed: the full s x kv_seq block; causal: half of it when kv_seq == seq (the `causal`
  // convention of docs/METRICS.md), else the exact visible count of the bottom-right block, sum_i (kv_seq - seq + i + 1).
  double scores = sq * sk;
  if (causal) scores = s.keys() == s.seq ? 0.5 * sq * sq : sq * sk - sq * (sq - 1) / 2;
  const double fwd =
      2.0 * double(s.batch) * double(s.heads) * double(s.head_dim + s.v_dim()) * scores;  // Q K^T and P V
  return {fwd, 2 * fwd, 2.5 * fwd};
}

// ---- plan --------------------------------------------------------------------------------------------

struct AttentionPlan::Graphs : GraphPair {};

AttentionPlan::AttentionPlan(cudnnHandle_t handle, const AttentionShape& shape)
    : s_(shape), g_(std::make_unique<Graphs>()) {
  check_attention_shape(shape);
  if (shape.segments > 0) require_packed_cudnn("attention " + ops::describe(shape));
  const AttentionShape s = graph_shape(shape);
  const bool packed = s.segments > 0;
  const char* direction = "forward";
  try {
    // Forward: O and Stats (lse) from Q, K, V; causal with the diagonal at the top left (j <= i), or at the
    // bottom right (j <= i + kv_seq - seq) when the queries are the last seq of kv_seq positions. Packed: per segment
    // (the padding mask with each segment's length), the tensors reached through the ragged offsets.
    g_->fwd = new_graph(fe::DataType_t::BFLOAT16);
    Graph& f = *g_->fwd;
    auto q = tensor(f, "Q", kQ, dims(s, s.heads), strides(s.q));
    auto k = tensor(f, "K", kK, kv_dims(s), strides(s.k));
    auto v = tensor(f, "V", kV, v_dims(s), strides(s.v));
    auto fwd_opts = fe::graph::SDPA_attributes()
                        .set_name("sdpa_forward")
                        .set_generate_stats(true)
                        .set_attn_scale(attn_scale(s))
                        .set_diagonal_alignment(diagonal(s))
                        .set_diagonal_band_right_bound(0);
    std::optional<Ragged> rf;
    if (packed) {
      rf.emplace(f, s);
      q->set_ragged_offset(rf->q), k->set_ragged_offset(rf->k), v->set_ragged_offset(rf->v);
      fwd_opts.set_padding_mask(true).set_seq_len_q(rf->seq_q).set_seq_len_kv(rf->seq_kv);
    }
    auto [o, stats] = f.sdpa(q, k, v, fwd_opts);
    output(o, kO, o_dims(s), strides(s.o));
    output(stats, kStats, stats_dims(s), lse_strides(s), fe::DataType_t::FLOAT);
    if (packed) o->set_ragged_offset(rf->o), stats->set_ragged_offset(rf->stats);
    build_graph(f, handle, g_->fwd_ws, g_->fwd_engine);

    // Backward: dQ, dK, dV (written through the same strides as Q, K, V) from Q, K, V, O, dO, Stats.
    direction = "backward";
    g_->bwd = new_graph(fe::DataType_t::BFLOAT16);
    Graph& b = *g_->bwd;
    auto bq = tensor(b, "Q", kQ, dims(s, s.heads), strides(s.q));
    auto bk = tensor(b, "K", kK, kv_dims(s), strides(s.k));
    auto bv = tensor(b, "V", kV, v_dims(s), strides(s.v));
    auto bo = tensor(b, "O", kO, o_dims(s), strides(s.o));
    auto bdo = tensor(b, "dO", kDout, o_dims(s), strides(s.o));
    auto bstats = tensor(b, "Stats", kStats, stats_dims(s), lse_strides(s), fe::DataType_t::FLOAT);
    auto bwd_opts = fe::graph::SDPA_backward_attributes()
                        .set_name("sdpa_backward")
                        .set_attn_scale(attn_scale(s))
                        .set_diagonal_alignment(diagonal(s))
                        .set_diagonal_band_right_bound(0)
                        .set_deterministic_algorithm(s.deterministic);
    std::optional<Ragged> rb;
    if (packed) {
      rb.emplace(b, s);
      bq->set_ragged_offset(rb->q), bk->set_ragged_offset(rb->k), bv->set_ragged_offset(rb->v);
      bo->set_ragged_offset(rb->o), bdo->set_ragged_offset(rb->o), bstats->set_ragged_offset(rb->stats);
      const std::int64_t tokens = shape.batch * shape.seq;  // every segment lies in the micro-batch's tokens
      bwd_opts.set_padding_mask(true).set_seq_len_q(rb->seq_q).set_seq_len_kv(rb->seq_kv);
      bwd_opts.set_max_total_seq_len_q(tokens).set_max_total_seq_len_kv(tokens);
    }
    auto [dq, dk, dv] = b.sdpa_backward(bq, bk, bv, bo, bdo, bstats, bwd_opts);
    output(dq, kDq, dims(s, s.heads), strides(s.q));
    output(dk, kDk, kv_dims(s), strides(s.k));
    output(dv, kDv, v_dims(s), strides(s.v));
    if (packed) dq->set_ragged_offset(rb->q), dk->set_ragged_offset(rb->k), dv->set_ragged_offset(rb->v);
    build_graph(b, handle, g_->bwd_ws, g_->bwd_engine);
  } catch (...) {  // say which shape and direction
    rethrow_graph_error(fmt::format("attention {} {}", direction, ops::describe(shape)));
  }
}

AttentionPlan::~AttentionPlan() = default;
AttentionPlan::AttentionPlan(AttentionPlan&&) noexcept = default;
AttentionPlan& AttentionPlan::operator=(AttentionPlan&&) noexcept = default;

std::size_t AttentionPlan::forward_workspace_bytes() const { return std::size_t(g_->fwd_ws); }
std::size_t AttentionPlan::backward_workspace_bytes() const { return std::size_t(g_->bwd_ws); }
std::size_t AttentionPlan::workspace_bytes() const {
  return std::max(forward_workspace_bytes(), backward_workspace_bytes());
}

std::string AttentionPlan::describe() const {
  return g_->describe("attention " + ops::describe(s_));
}

void AttentionPlan::forward(cudnnHandle_t handle, const AttentionForwardArgs& a, Workspace ws,
                            cudaStream_t stream) const {
  const PointerCheck<AttentionShape> c{s_, "forward"};
  c.data({{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.o, "o"}, {a.lse, "lse"}});
  if (s_.segments > 0) check_packed(c, a.packed);
  c.workspace(ws, forward_workspace_bytes());
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, mut(a.q)}, {kK, mut(a.k)}, {kV, mut(a.v)}, {kO, a.o}, {kStats, a.lse}};
  if (s_.segments > 0) add_packed(pack, a.packed);
  TB_CHECK(cudnnSetStream(handle, stream));
  TB_CHECK(g_->fwd->execute(handle, pack, ws.ptr));
}

void AttentionPlan::backward(cudnnHandle_t handle, const AttentionBackwardArgs& a, Workspace ws,
                             cudaStream_t stream) const {
  const PointerCheck<AttentionShape> c{s_, "backward"};
  c.data({{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.o, "o"}, {a.dout, "dout"}, {a.lse, "lse"}, {a.dq, "dq"},
          {a.dk, "dk"}, {a.dv, "dv"}});
  if (s_.segments > 0) check_packed(c, a.packed);
  c.workspace(ws, backward_workspace_bytes());
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, mut(a.q)},       {kK, mut(a.k)}, {kV, mut(a.v)}, {kO, mut(a.o)}, {kDout, mut(a.dout)},
      {kStats, mut(a.lse)}, {kDq, a.dq},    {kDk, a.dk},    {kDv, a.dv}};
  if (s_.segments > 0) add_packed(pack, a.packed);
  TB_CHECK(cudnnSetStream(handle, stream));
  TB_CHECK(g_->bwd->execute(handle, pack, ws.ptr));
}

}  // namespace tb::ops
