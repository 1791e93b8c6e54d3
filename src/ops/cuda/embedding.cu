// ops/cuda/embedding.cu: see embedding.h. Row kernels use a 2-D block of (8-element vectors of a row) x (rows).
// embedding_backward, step by step (all on `stream`, no host sync):
//   1. keys[i] = tok[i] (or V for a token outside [0, V): sorted last, skipped), vals[i] = i
//   2. CUB stable radix sort of (key, position) over the bits that V needs
//   3. chunk kernel, one block per (64 sorted positions, column slice): sums runs of equal tokens in order. A run
//      that continues a token from the previous chunk (a "head") goes to heads[chunk]; any other run (the token's
//      first piece) is added to dE[token] by the only block that holds that token's first position
//   4. tail kernel: for each chunk whose last token continues into the next chunk and started in it, adds the
//      heads of the following chunks, in chunk order, to dE[token]
#include "ops/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <string>

#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr int kChunk = 64;  // sorted positions per block in the backward


__device__ __forceinline__ void add8(float* p, const float (&a)[8]) {
  float4* q = reinterpret_cast<float4*>(p);
  float4 u = q[0], v = q[1];
  u.x += a[0], u.y += a[1], u.z += a[2], u.w += a[3];
  v.x += a[4], v.y += a[5], v.z += a[6], v.w += a[7];
  q[0] = u;
  q[1] = v;
}
// bf16 gradients: the 8 sums added in fp32 and rounded once.
__device__ __forceinline__ void add8(bf16* p, const float (&a)[8]) {
  float b[8];
  unpack8(load8_rw(p), b);
#pragma unroll
  for (int k = 0; k < 8; ++k) b[k] += a[k];
  store8(p, pack8(b));
}
__device__ __forceinline__ void store8f(float* p, const float (&a)[8]) {
  float4* q = reinterpret_cast<float4*>(p);
  q[0] = make_float4(a[0], a[1], a[2], a[3]);
  q[1] = make_float4(a[4], a[5], a[6], a[7]);
}

__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(bf16* y, std::int64_t ys, const bf16* table, std::int64_t ts, const std::int32_t* tokens,
                             std::int64_t n, int vocab, int nv) {
  const int v = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (v >= nv) return;
  const int col = v * kVec;
  for (std::int64_t t = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; t < n;
       t += std::int64_t(gridDim.y) * blockDim.y) {
    const int tok = __ldg(tokens + t);
    const uint4 nan = make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
    store8(y + t * ys + col, tok >= 0 && tok < vocab ? load8(table + tok * ts + col) : nan);
  }
}

__global__ void embedding_sort_keys_kernel(int* keys, int* vals, const std::int32_t* tokens, int n, int vocab) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const int tok = tokens[i];
  keys[i] = tok >= 0 && tok < vocab ? tok : vocab;
  vals[i] = i;
}

template <class G>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_chunk_kernel(G* de, std::int64_t des, const bf16* dy, std::int64_t dys, const int* keys,
                                    const int* pos, float* heads, int n, int vocab, int dim) {
  __shared__ int s_tok[kChunk], s_pos[kChunk];  // the chunk's sorted tokens and their positions
  const int c = int(blockIdx.x), lo = c * kChunk, cnt = min(kChunk, n - lo);
  for (int j = int(threadIdx.x); j < cnt; j += int(blockDim.x)) {
    s_tok[j] = keys[lo + j];
    s_pos[j] = pos[lo + j];
  }
  const int prev = lo > 0 ? keys[lo - 1] : -1;
  __syncthreads();
  const int col = int(blockIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (col >= dim) return;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  bool first_run = true;
  for (int j0 = 0; j0 < cnt; j0 += 4) {
    uint4 rows[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (j0 + u < cnt) rows[u] = load8(dy + std::int64_t(s_pos[j0 + u]) * dys + col);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = j0 + u;
      if (j >= cnt) break;
      float g[8];
      unpack8(rows[u], g);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] += g[k];
      const int tok = s_tok[j];
      if (j + 1 < cnt && s_tok[j + 1] == tok) continue;  // the run goes on inside this chunk
      if (tok < vocab) {
        if (first_run && prev == tok)
          store8f(heads + std::int64_t(c) * dim + col, acc);  // a continuation: the tail kernel adds it
        else
          add8(de + std::int64_t(tok) * des + col, acc);  // this block holds the token's first position
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = 0.f;
      first_run = false;
    }
  }
}

template <class G>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_tail_kernel(G* de, std::int64_t des, const int* keys, const float* heads, int n, int vocab,
                                   int dim) {
  const int c = int(blockIdx.x), lo = c * kChunk, hi = min(lo + kChunk, n);
  if (hi >= n) return;
  const int tok = keys[hi - 1];
  if (tok >= vocab || keys[hi] != tok) return;                   // nothing continues into the next chunk
  if (lo > 0 && keys[lo] == tok && keys[lo - 1] == tok) return;  // started before this chunk: not the owner
  const int col = int(blockIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (col >= dim) return;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int c2 = c + 1; c2 * kChunk < n && keys[c2 * kChunk] == tok; ++c2) {
    const float4* h = reinterpret_cast<const float4*>(heads + std::int64_t(c2) * dim + col);
    const float4 u = h[0], v = h[1];
    acc[0] += u.x, acc[1] += u.y, acc[2] += u.z, acc[3] += u.w;
    acc[4] += v.x, acc[5] += v.y, acc[6] += v.z, acc[7] += v.w;
  }
  add8(de + std::int64_t(tok) * des + col, acc);
}

__global__ void __launch_bounds__(kThreads)
    position_add_kernel(bf16* y, std::int64_t ys, const bf16* p, std::int64_t ps, std::int64_t rows, int seq,
                        std::int64_t first, int nv) {
  const int v = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (v >= nv) return;
  const int col = v * kVec;
  for (std::int64_t t = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; t < rows;
       t += std::int64_t(gridDim.y) * blockDim.y) {
    float a[8], b[8];
    unpack8(load8_rw(y + t * ys + col), a);
    unpack8(load8(p + ((first + t) % seq) * ps + col), b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += b[k];
    store8(y + t * ys + col, pack8(a));
  }
}

// Position s collects the rows t = ((s - first) mod seq) + k seq, k = 0, 1, ... (in row order: deterministic).
template <class G>
__global__ void __launch_bounds__(kThreads)
    position_backward_kernel(G* dp, std::int64_t dps, const bf16* dy, std::int64_t dys, std::int64_t rows,
                             int seq, std::int64_t first, int nv) {
  const int v = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (v >= nv) return;
  const int col = v * kVec;
  for (std::int64_t s = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; s < seq;
       s += std::int64_t(gridDim.y) * blockDim.y) {
    const std::int64_t t0 = ((s - first) % seq + seq) % seq;
    if (t0 >= rows) continue;  // (fewer rows than positions: this one is not held)
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (std::int64_t t = t0; t < rows; t += seq) {
      float g[8];
      unpack8(load8(dy + t * dys + col), g);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] += g[k];
    }
    add8(dp + s * dps + col, acc);
  }
}

// ---- host side ----

void check_tokens(const TensorView<const std::int32_t>& tokens, const std::string& what) {
  TB_REQUIRE(tokens.rank() == 1 && (tokens.stride(0) == 1 || tokens.size(0) <= 1),
             what + ": tokens must be a contiguous 1-D [n] int32 view, got " + tokens.shape_str());
  TB_REQUIRE(tokens.size(0) == 0 || tokens.data() != nullptr, what + ": tokens is an empty view");
  TB_REQUIRE(tokens.size(0) < (std::int64_t(1) << 31) - kChunk, what + ": at most 2^31 - 65 tokens");
}

// Byte offsets of the backward's workspace parts (each 256-byte aligned).
struct BackwardLayout {
  std::size_t keys_in, vals_in, keys_out, vals_out, heads, cub, cub_bytes, total;
};
BackwardLayout backward_layout(std::int64_t n, std::int64_t vocab, std::int64_t dim) {
  BackwardLayout l{};
  const std::size_t ints = round_up256(std::size_t(n) * sizeof(int));
  const std::size_t chunks = std::size_t(ceil_div(n, kChunk));
  l.keys_in = 0;
  l.vals_in = l.keys_in + ints;
  l.keys_out = l.vals_in + ints;
  l.vals_out = l.keys_out + ints;
  l.heads = l.vals_out + ints;
  l.cub = l.heads + round_up256(chunks * std::size_t(dim) * sizeof(float));
  l.cub_bytes = 0;
  TB_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, l.cub_bytes, static_cast<const int*>(nullptr),
                                           static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
                                           static_cast<int*>(nullptr), int(n), 0,
                                           int(std::bit_width(std::uint32_t(vocab)))));
  l.total = l.cub + round_up256(l.cub_bytes);
  return l;
}

void check_positions(const std::string& what, int seq, std::int64_t table_rows, std::int64_t first) {
  TB_REQUIRE(seq >= 1 && seq <= table_rows && first >= 0,
             what + ": seq " + std::to_string(seq) + " must be in [1, the table's " + std::to_string(table_rows) +
                 " positions] and the first row's index (" + std::to_string(first) + ") >= 0");
}

}  // namespace

void embedding_forward(TensorView<bf16> y, TensorView<const bf16> table, TensorView<const std::int32_t> tokens,
                       cudaStream_t stream) {
  const std::string what = "embedding_forward";
  check_tokens(tokens, what);
  TB_REQUIRE(table.rank() == 2, what + ": table must be [V, d], got " + table.shape_str());
  const std::int64_t n = tokens.size(0), vocab = table.size(0), d = table.size(1);
  require_rows16(table, vocab, d, what + ": table");
  require_rows16(y, n, d, what + ": y");
  TB_REQUIRE(vocab < (std::int64_t(1) << 31), what + ": at most 2^31 - 1 rows in the table");
  if (n == 0 || d == 0) return;
  const RowLaunch l = row_launch(n, int(d / kVec), kThreads);
  embedding_forward_kernel<<<l.grid, l.block, 0, stream>>>(y.data(), y.stride(0), table.data(), table.stride(0),
                                                           tokens.data(), n, int(vocab), int(d / kVec));
  TB_CHECK_LAUNCH();
}

std::size_t embedding_backward_workspace_bytes(std::int64_t n, std::int64_t vocab, std::int64_t dim) {
  if (n <= 0) return 0;
  return backward_layout(n, vocab, dim).total;
}

template <class G>
void embedding_backward(TensorView<G> dtable, TensorView<const bf16> dy, TensorView<const std::int32_t> tokens,
                        cudaStream_t stream, Workspace workspace) {
  const std::string what = "embedding_backward";
  check_tokens(tokens, what);
  TB_REQUIRE(dtable.rank() == 2, what + ": dtable must be [V, d], got " + dtable.shape_str());
  const std::int64_t n = tokens.size(0), vocab = dtable.size(0), d = dtable.size(1);
  TB_REQUIRE(d % kVec == 0, what + ": d must be a multiple of 8, got " + std::to_string(d));
  require_rows16(dtable, vocab, d, what + ": dtable");
  require_rows16(dy, n, d, what + ": dy");
  TB_REQUIRE(vocab >= 1 && vocab < (std::int64_t(1) << 30), what + ": the vocabulary must hold 1 to 2^30 - 1 rows");
  if (n == 0 || d == 0) return;
  const BackwardLayout l = backward_layout(n, vocab, d);
  ScratchBuffer ws(workspace, l.total, stream, what);
  int* keys_in = ws.as<int>(l.keys_in);
  int* vals_in = ws.as<int>(l.vals_in);
  int* keys_out = ws.as<int>(l.keys_out);
  int* vals_out = ws.as<int>(l.vals_out);
  float* heads = ws.as<float>(l.heads);

  embedding_sort_keys_kernel<<<unsigned(ceil_div(n, kThreads)), kThreads, 0, stream>>>(keys_in, vals_in, tokens.data(),
                                                                                       int(n), int(vocab));
  TB_CHECK_LAUNCH();
  std::size_t cub_bytes = l.cub_bytes;
  TB_CHECK(cub::DeviceRadixSort::SortPairs(ws.as<void>(l.cub), cub_bytes, keys_in, keys_out, vals_in, vals_out, int(n),
                                           0, int(std::bit_width(std::uint32_t(vocab))), stream));
  const int nv = int(d / kVec);
  const int bx = int(std::min<std::int64_t>(kThreads, ceil_div(nv, 32) * 32));
  const dim3 grid(unsigned(ceil_div(n, kChunk)), unsigned(ceil_div(nv, bx)));
  embedding_backward_chunk_kernel<<<grid, bx, 0, stream>>>(dtable.data(), dtable.stride(0), dy.data(), dy.stride(0),
                                                           keys_out, vals_out, heads, int(n), int(vocab), int(d));
  TB_CHECK_LAUNCH();
  embedding_backward_tail_kernel<<<grid, bx, 0, stream>>>(dtable.data(), dtable.stride(0), keys_out, heads, int(n),
                                                          int(vocab), int(d));
  TB_CHECK_LAUNCH();
}

void position_embedding_add(TensorView<bf16> y, TensorView<const bf16> pos_table, int seq, cudaStream_t stream,
                            std::int64_t first) {
  const std::string what = "position_embedding_add";
  TB_REQUIRE(y.rank() == 2 && pos_table.rank() == 2 && pos_table.size(1) == y.size(1),
             what + ": y [n, d] and the table [max_seq, d] must have the same width, got " + y.shape_str() + " and " +
                 pos_table.shape_str());
  const std::int64_t rows = y.size(0), d = y.size(1);
  check_positions(what, seq, pos_table.size(0), first);
  require_rows16(y, rows, d, what + ": y");
  require_rows16(pos_table, pos_table.size(0), d, what + ": table");
  if (rows == 0 || d == 0) return;
  const RowLaunch l = row_launch(rows, int(d / kVec), kThreads);
  position_add_kernel<<<l.grid, l.block, 0, stream>>>(y.data(), y.stride(0), pos_table.data(), pos_table.stride(0),
                                                      rows, seq, first % seq, int(d / kVec));
  TB_CHECK_LAUNCH();
}

template <class G>
void position_embedding_backward(TensorView<G> dpos_table, TensorView<const bf16> dy, int seq,
                                 cudaStream_t stream, std::int64_t first) {
  const std::string what = "position_embedding_backward";
  TB_REQUIRE(dy.rank() == 2 && dpos_table.rank() == 2 && dpos_table.size(1) == dy.size(1),
             what + ": dy [n, d] and dtable [max_seq, d] must have the same width, got " + dy.shape_str() + " and " +
                 dpos_table.shape_str());
  const std::int64_t rows = dy.size(0), d = dy.size(1);
  check_positions(what, seq, dpos_table.size(0), first);
  TB_REQUIRE(d % kVec == 0, what + ": d must be a multiple of 8, got " + std::to_string(d));
  require_rows16(dy, rows, d, what + ": dy");
  require_rows16(dpos_table, dpos_table.size(0), d, what + ": dtable");
  if (rows == 0 || d == 0) return;
  const RowLaunch l = row_launch(seq, int(d / kVec), kThreads);
  position_backward_kernel<<<l.grid, l.block, 0, stream>>>(dpos_table.data(), dpos_table.stride(0), dy.data(),
                                                           dy.stride(0), rows, seq, first % seq, int(d / kVec));
  TB_CHECK_LAUNCH();
}

template void embedding_backward<float>(TensorView<float>, TensorView<const bf16>, TensorView<const std::int32_t>,
                                        cudaStream_t, Workspace);
template void embedding_backward<bf16>(TensorView<bf16>, TensorView<const bf16>, TensorView<const std::int32_t>,
                                       cudaStream_t, Workspace);
template void position_embedding_backward<float>(TensorView<float>, TensorView<const bf16>, int, cudaStream_t,
                                                 std::int64_t);
template void position_embedding_backward<bf16>(TensorView<bf16>, TensorView<const bf16>, int, cudaStream_t,
                                                std::int64_t);

}  // namespace tb::ops
