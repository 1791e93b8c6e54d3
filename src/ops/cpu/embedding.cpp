// ops/cpu/embedding.cpp: y[t,:] = E[tok[t],:], its scatter-add backward, and learned positions.
#include "ops/cpu/embedding.h"

#include <string>

namespace tb::ops::cpu {
namespace {

void check_tokens(std::span<const std::int32_t> tokens, std::int64_t vocab, const char* what) {
  for (std::size_t t = 0; t < tokens.size(); ++t)
    TB_REQUIRE(tokens[t] >= 0 && tokens[t] < vocab,
               std::string(what) + ": token " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                   " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

// positions.size() == rows of y (or dy), each a row of the table.
template <class T>
void check_positions(const TensorView<T>& y, std::int64_t table_rows, std::int64_t table_cols,
                     std::span<const std::int64_t> positions, const char* what) {
  require_rows(y, std::string(what) + ": y");
  TB_REQUIRE(std::int64_t(positions.size()) == y.size(0) && table_cols == y.size(1),
             std::string(what) + ": " + std::to_string(positions.size()) + " positions and a table of width " +
                 std::to_string(table_cols) + " for rows " + y.shape_str());
  for (std::size_t t = 0; t < positions.size(); ++t)
    TB_REQUIRE(positions[t] >= 0 && positions[t] < table_rows,
               std::string(what) + ": position " + std::to_string(positions[t]) + " of row " + std::to_string(t) +
                   " is outside the table's " + std::to_string(table_rows) + " positions");
}

}  // namespace

template <class T>
void embedding_forward(TensorView<T> y, In<T> table, std::span<const std::int32_t> tokens) {
  require_rows(table, "embedding_forward: table");
  const std::int64_t n = std::int64_t(tokens.size()), d = table.size(1);
  require_shape(y, {n, d}, "embedding_forward: y");
  require_rows(y, "embedding_forward: y");
  check_tokens(tokens, table.size(0), "embedding_forward");
  for (std::int64_t t = 0; t < n; ++t) {
    const T* e = row(table, tokens[t]);
    T* yr = row(y, t);
    for (std::int64_t i = 0; i < d; ++i) yr[i] = e[i];
  }
}

template <class T>
void embedding_backward(TensorView<T> dtable, In<T> dy, std::span<const std::int32_t> tokens) {
  require_rows(dtable, "embedding_backward: dtable");
  const std::int64_t n = std::int64_t(tokens.size()), d = dtable.size(1);
  require_shape(dy, {n, d}, "embedding_backward: dy");
  require_rows(dy, "embedding_backward: dy");
  check_tokens(tokens, dtable.size(0), "embedding_backward");
  for (std::int64_t t = 0; t < n; ++t) {
    T* de = row(dtable, tokens[t]);
    const T* g = row(dy, t);
    for (std::int64_t i = 0; i < d; ++i) de[i] += g[i];
  }
}

template <class T>
void position_embedding_add(TensorView<T> y, In<T> pos_table, int seq) {
  require_rows(y, "position_embedding_add: y");
  require_rows(pos_table, "position_embedding_add: table");
  TB_REQUIRE(seq >= 1 && seq <= pos_table.size(0) && y.size(0) % seq == 0,
             "position_embedding_add: seq " + std::to_string(seq) + " must divide the " +
                 std::to_string(y.size(0)) + " rows and be at most the table's " +
                 std::to_string(pos_table.size(0)) + " positions");
  TB_REQUIRE(pos_table.size(1) == y.size(1), "position_embedding_add: table width " + pos_table.shape_str() +
                                                  " does not match y " + y.shape_str());
  for (std::int64_t t = 0; t < y.size(0); ++t) {
    const T* p = row(pos_table, t % seq);
    T* yr = row(y, t);
    for (std::int64_t i = 0; i < y.size(1); ++i) yr[i] += p[i];
  }
}

template <class T>
void position_embedding_backward(TensorView<T> dpos_table, In<T> dy, int seq) {
  require_rows(dy, "position_embedding_backward: dy");
  require_rows(dpos_table, "position_embedding_backward: dtable");
  TB_REQUIRE(seq >= 1 && seq <= dpos_table.size(0) && dy.size(0) % seq == 0 && dpos_table.size(1) == dy.size(1),
             "position_embedding_backward: dy " + dy.shape_str() + " does not fit the table " +
                 dpos_table.shape_str() + " with seq " + std::to_string(seq));
  for (std::int64_t t = 0; t < dy.size(0); ++t) {
    T* dp = row(dpos_table, t % seq);
    const T* g = row(dy, t);
    for (std::int64_t i = 0; i < dy.size(1); ++i) dp[i] += g[i];
  }
}

template <class T>
void position_embedding_add_at(TensorView<T> y, In<T> pos_table, std::span<const std::int64_t> positions) {
  require_rows(pos_table, "position_embedding_add_at: table");
  check_positions(y, pos_table.size(0), pos_table.size(1), positions, "position_embedding_add_at");
  for (std::int64_t t = 0; t < y.size(0); ++t) {
    const T* p = row(pos_table, positions[std::size_t(t)]);
    T* yr = row(y, t);
    for (std::int64_t i = 0; i < y.size(1); ++i) yr[i] += p[i];
  }
}

template <class T>
void position_embedding_backward_at(TensorView<T> dpos_table, In<T> dy, std::span<const std::int64_t> positions) {
  require_rows(dpos_table, "position_embedding_backward_at: dtable");
  check_positions(dy, dpos_table.size(0), dpos_table.size(1), positions, "position_embedding_backward_at");
  for (std::int64_t t = 0; t < dy.size(0); ++t) {
    T* dp = row(dpos_table, positions[std::size_t(t)]);
    const T* g = row(dy, t);
    for (std::int64_t i = 0; i < dy.size(1); ++i) dp[i] += g[i];
  }
}

#define TB_INSTANTIATE(T)                                                                          \
  template void embedding_forward<T>(TensorView<T>, In<T>, std::span<const std::int32_t>);        \
  template void embedding_backward<T>(TensorView<T>, In<T>, std::span<const std::int32_t>);       \
  template void position_embedding_add<T>(TensorView<T>, In<T>, int);                            \
  template void position_embedding_backward<T>(TensorView<T>, In<T>, int);                       \
  template void position_embedding_add_at<T>(TensorView<T>, In<T>, std::span<const std::int64_t>); \
  template void position_embedding_backward_at<T>(TensorView<T>, In<T>, std::span<const std::int64_t>);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
