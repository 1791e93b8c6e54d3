// ops/cuda/grouped_gemm.h: grouped GEMMs whose group sizes stay on the device (the Mixture-of-Experts experts),
// planned once per shape and run many times, capturable in a CUDA graph (no host sync, no host copy of the sizes).
// E groups (experts); group e owns rows [start_e, start_e + m_e) of row-major buffers of R rows (the tokens,
// permuted expert-major), m_e = count_e; start and count are device int32 arrays of E, read on the stream at run
// time (m_e = 0 allowed, any m_e; start_e a multiple of 16, as kMoeRowAlign makes it, for the fp8 weight
// gradient). Each group has its own weight W_e [n, k] (out, in), a buffer of its own: the plan's shape n, k are
// the weight's, in all three layouts (gemm.h's names; fp32 accumulate, row-major, X_e = rows of X):
//   abt (forward):        Y_e[m_e, n]  = alpha_e · X_e[m_e, k] · W_e[n, k]^T
//   ab  (data gradient):  dX_e[m_e, k] = alpha_e · dY_e[m_e, n] · W_e[n, k]
//   atb (weight gradient): dW_e[n, k] (+)= alpha_e · dY_e[m_e, n]^T · X_e[m_e, k]
// accumulate: D (+)= product (beta 1) instead of D = product (beta 0). Rows of Y / dX outside every group are not
// written. atb with m_e = 0: dW_e is zeroed when overwriting and left untouched when accumulating.
// alpha_e = a_scale · b_scale_e (fp8 per-tensor scales from device memory, 1 when null; bf16: 1).
// FLOPs: 2 · n · k · sum_e m_e.
//
// Operands by layout (A, B and D of GroupedGemmArgs; "grouped": one buffer per group, a device array of E
// pointers, e.g. GroupPointers; "rows": one buffer of R rows whose group e part starts at row start_e):
//   abt: A = X [R, k] rows,  B = W_e [n, k] grouped,       D = Y [R, n] rows
//   ab:  A = dY [R, n] rows, B = W_e [n, k] grouped,       D = dX [R, k] rows
//   atb: A = dY [R, n] rows, B = X [R, k] rows,            D = dW_e [n, k] grouped
// FP8 (Hopper FP8 tensor cores read both operands K-major), with the caller's transposed copies:
//   abt: A = X e4m3 (one scale a_scale), B = W_e e4m3 (per-expert scales b_scale[e])
//   ab:  A = dY e5m2|e4m3 (a_scale), B = Wt_e [k, n] grouped: W_e transposed, e4m3 (b_scale[e])
//   atb: A = dYt [n, R], B = Xt [k, R]: whole-buffer transposes (row length R = shape.rows, a multiple of 16), group e
//        reading columns [start_e, start_e + m_e); one scale each (a_scale, b_scale[0])
// Types (a x b -> d), the fp8 ones as in gemm.h: bf16 -> bf16 (every layout), bf16 -> f32 (atb), e4m3 -> bf16,
// e4m3xe5m2 -> bf16, e5m2xe4m3 -> bf16, e4m3 -> f32, e5m2xe4m3 -> f32 (every layout); fast_accum: e4m3 -> bf16 only.
// Limits: n, k multiples of 8 (bf16) or 16 (fp8) and below 2^31; every operand 16-byte aligned (TMA).
//
// Kernels: CUTLASS 3.x sm90 pointer-array grouped GEMMs (TMA, warp-specialized, persistent), one per types x layout
// x configuration (GroupedGemmConfig); the default configuration per kernel is grouped_gemm_default_config.
// Raster order (GroupedGemmRaster): the persistent CTAs walk a group's output tiles down M (CUTLASS's grouped default)
// or across N. Only atb fixes both extents (M = n, N = k); there the default walks across N when the output has more
// tiles down M than across N (CUTLASS's heuristic for one GEMM), so the tiles in flight share A's rows in L2 instead of
// reading all of A once per column of tiles (Mixtral's fc1 weight gradient: A = dY_e [m_e, 28672], 16 columns).
// Before each GEMM a small kernel fills the per-group shapes, pointers and alphas from start / count on the stream.
// A plan's device arrays are shared by its runs: run one plan on one stream at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gemm.h"

namespace tb::ops {

struct GroupedGemmShape {
  std::int64_t n = 0, k = 0;  // every group's weight W_e is [n, k]
  int groups = 0;             // E
  std::int64_t rows = 0;      // R: start_e + count_e <= R (more rows are not computed); fp8 atb: the transposes'
                              // row length (a multiple of 16)
  DType a = DType::bf16, b = DType::bf16, d = DType::bf16;
  GemmLayout layout = GemmLayout::abt;
  bool fast_accum = false;  // fp8 e4m3 -> bf16 only: no promotion of partial sums to fp32 (the forward GEMM)
  auto operator<=>(const GroupedGemmShape&) const = default;
};
// "e5m2xe4m3->f32 atb n=4096 k=14336 groups=8 rows=65536"
std::string describe(const GroupedGemmShape& s);
// Throws tb::Error{config} saying what is wrong and what to do: unsupported types or layout, bad dimensions, fp8
// dimensions not multiples of 16, fast_accum where no such kernel exists.
void check_grouped_gemm_shape(const GroupedGemmShape& s);

// Kernel configurations: schedule (cooperative: two consumer warp groups on one tile; ping-pong: one tile each,
// alternating), CTA tile M x N (K: 128 bytes of the input type) and cluster (CTAs along M sharing B's tiles).
enum class GroupedGemmConfig : std::uint8_t {
  coop_128x128_c1,
  coop_128x256_c1,
  coop_128x256_c2,
  pingpong_128x128_c1,
  pingpong_128x128_c2,
};
std::string_view grouped_gemm_config_name(GroupedGemmConfig c);  // "coop_128x256_c1"
enum class GroupedGemmRaster : std::uint8_t { along_m, along_n };
// along_n for atb when ceil(n / 128) > ceil(k / tile N of config); along_m otherwise (the top of this file).
GroupedGemmRaster grouped_gemm_default_raster(const GroupedGemmShape& s, GroupedGemmConfig config);
// The configuration a plan uses unless told otherwise (TB_GROUPED_GEMM_DEFAULTS, grouped_gemm_instances.h).
GroupedGemmConfig grouped_gemm_default_config(const GroupedGemmShape& s);
// The configurations compiled for the shape's kernel (types x layout), the default among them.
std::vector<GroupedGemmConfig> grouped_gemm_configs(const GroupedGemmShape& s);

// E device pointers in device memory, uploaded once (the per-group operands: weights, their gradients, copies).
class GroupPointers {
 public:
  GroupPointers() = default;
  GroupPointers(int device, std::span<void* const> pointers);  // each 16-byte aligned
  const void* const* in() const { return static_cast<const void* const*>(buf_.get()); }
  void* const* out() const { return static_cast<void* const*>(buf_.get()); }
  int size() const { return size_; }

 private:
  DeviceBuffer buf_;
  int size_ = 0;
};

struct GroupedGemmArgs {
  const std::int32_t* start = nullptr;  // [E] device
  const std::int32_t* count = nullptr;  // [E] device
  const void* a = nullptr;              // rows (see the top of this file)
  const void* b = nullptr;              // atb: rows; else null
  const void* const* b_groups = nullptr;  // abt, ab: E pointers (device array); else null
  void* d = nullptr;                      // abt, ab: rows; else null
  void* const* d_groups = nullptr;        // atb: E pointers (device array); else null
  const float* a_scale = nullptr;         // fp8: one device float; null: 1
  const float* b_scale = nullptr;         // fp8: abt, ab: E device floats (per group); atb: one; null: 1
  bool accumulate = false;
};

namespace grouped {
struct Arrays;
class Runner;
}  // namespace grouped

class GroupedGemmPlan {
 public:
  // Validates the shape, allocates the per-group arrays and builds the kernel (device made current). config:
  // one of grouped_gemm_configs(s); default grouped_gemm_default_config(s); raster: default
  // grouped_gemm_default_raster(s, config).
  GroupedGemmPlan(int device, const GroupedGemmShape& s, std::optional<GroupedGemmConfig> config = std::nullopt,
                  std::optional<GroupedGemmRaster> raster = std::nullopt);
  ~GroupedGemmPlan();
  GroupedGemmPlan(GroupedGemmPlan&&) noexcept;
  GroupedGemmPlan& operator=(GroupedGemmPlan&&) noexcept;

  // Enqueues the prepare kernel and the GEMM on stream: launches only, no host sync (graph-capturable). Checks on
  // the host which operands the layout needs and their alignment.
  void run(const GroupedGemmArgs& args, cudaStream_t stream);

  const GroupedGemmShape& shape() const { return s_; }
  GroupedGemmConfig config() const { return config_; }
  GroupedGemmRaster raster() const { return raster_; }
  double flops(std::int64_t total_rows) const { return 2.0 * double(s_.n) * double(s_.k) * double(total_rows); }

 private:
  GroupedGemmShape s_;
  GroupedGemmConfig config_;
  GroupedGemmRaster raster_;
  int device_ = 0;
  int prepare_blocks_ = 1;
  DeviceBuffer arrays_buf_;
  std::unique_ptr<grouped::Arrays> arrays_;
  std::unique_ptr<grouped::Runner> runner_;
};

}  // namespace tb::ops
