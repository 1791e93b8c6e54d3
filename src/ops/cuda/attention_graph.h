// ops/cuda/attention_graph.h: what the two SDPA graph builders share (attention.cpp: bf16, attention_fp8.cpp: FP8;
// include from those .cpp files only): the variant-pack uids, the tensor descriptions and the
// pointer checks. cuDNN's SDPA tensors are 4-D [batch, heads, seq, head_dim] with arbitrary strides, so each of our
// [b, s, heads, d] views is dims {b, heads, s, d} with strides {batch, head, seq, 1}; the softmax statistics (Stats)
// are fp32 {b, H, s, 1}, i.e. lse [b, H, s]; attention scale 1 / sqrt(d).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cudnn_graph.h"

namespace tb::ops::sdpa {

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttr = fe::graph::Tensor_attributes;
using TensorPtr = std::shared_ptr<TensorAttr>;

// Variant-pack uids (fixed, so a graph and the packs built for it always agree); bf16 uses the first nine.
enum Uid : std::int64_t {
  kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv,
  kDescaleQ, kDescaleK, kDescaleV, kDescaleO, kDescaleDout, kScaleO, kAmaxO,
  kScaleS, kDescaleS, kAmaxS, kScaleDp, kDescaleDp, kAmaxDp,
  kScaleDq, kScaleDk, kScaleDv, kAmaxDq, kAmaxDk, kAmaxDv,
  kSeqLenQ, kSeqLenKv, kOffsetQ, kOffsetK, kOffsetV, kOffsetO, kOffsetStats,  // packed shapes (ragged, THD)
};

inline constexpr std::size_t kAlign = 16;  // bytes: cuDNN's SDPA reads 16-byte vectors

inline std::vector<std::int64_t> dims(const AttentionShape& s, std::int64_t heads) {
  return {s.batch, heads, s.seq, s.head_dim};
}
inline std::vector<std::int64_t> strides(const HeadStrides& t) { return {t.batch, t.head, t.seq, 1}; }
inline std::vector<std::int64_t> stats_dims(const AttentionShape& s) { return {s.batch, s.heads, s.seq, 1}; }
inline std::vector<std::int64_t> stats_strides(const AttentionShape& s) { return {s.heads * s.seq, s.seq, 1, 1}; }
inline float attn_scale(const AttentionShape& s) { return float(1.0 / std::sqrt(double(s.head_dim))); }

// A graph with `io` tensors (unless a tensor says otherwise), fp32 intermediates and compute.
inline std::shared_ptr<Graph> new_graph(fe::DataType_t io) {
  auto g = std::make_shared<Graph>();
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// An input tensor, or marks t as an output; type NOT_SET leaves the type alone (inputs: the graph's io type).
inline TensorPtr tensor(Graph& g, const char* name, Uid uid, std::vector<std::int64_t> dim,
                        std::vector<std::int64_t> stride, fe::DataType_t type = fe::DataType_t::NOT_SET) {
  TensorAttr a = TensorAttr().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride));
  if (type != fe::DataType_t::NOT_SET) a.set_data_type(type);
  return g.tensor(a);
}
inline void output(const TensorPtr& t, Uid uid, std::vector<std::int64_t> dim, std::vector<std::int64_t> stride,
                   fe::DataType_t type = fe::DataType_t::NOT_SET) {
  t->set_output(true).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride));
  if (type != fe::DataType_t::NOT_SET) t->set_data_type(type);
}

inline void* mut(const void* p) { return const_cast<void*>(p); }  // the variant pack takes void* for inputs too

// Every pointer the variant pack binds, checked before anything is enqueued (cuDNN would read garbage silently);
// the messages name the direction and the shape (ops::describe of it, formatted only on a failure).
struct Named {
  const void* p;
  const char* what;
};
template <class Shape>
struct PointerCheck {
  const Shape& s;
  const char* direction;
  void data(std::initializer_list<Named> ps) const {
    for (const Named& n : ps)
      TB_REQUIRE(n.p != nullptr && reinterpret_cast<std::uintptr_t>(n.p) % kAlign == 0,
                 fmt::format("attention {} {}: {} must be a device pointer aligned to {} bytes, got {}", direction,
                             describe(s), n.what, kAlign, n.p));
  }
  void scalars(std::initializer_list<Named> ps) const {
    for (const Named& n : ps)
      TB_REQUIRE(n.p != nullptr && reinterpret_cast<std::uintptr_t>(n.p) % alignof(float) == 0,
                 fmt::format("attention {} {}: {} must be a device float (4-byte aligned), got {}", direction,
                             describe(s), n.what, n.p));
  }
  void workspace(Workspace ws, std::size_t need) const {
    TB_REQUIRE(ws.bytes >= need && (ws.ptr || need == 0),
               fmt::format("attention {} {}: needs {} bytes of workspace, got {}", direction, describe(s), need,
                           ws.bytes));
  }
};

}  // namespace tb::ops::sdpa
