// ops/cuda/gemm.cpp: see gemm.h. Descriptors are built once in the constructor; run() only launches.
#include "ops/cuda/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace tb::ops {
namespace {

constexpr GemmTypes kTypes[] = {
    {DType::bf16, DType::bf16, DType::bf16}, {DType::f16, DType::f16, DType::f16},
    {DType::tf32, DType::tf32, DType::f32},  {DType::f32, DType::f32, DType::f32},
    {DType::e4m3, DType::e4m3, DType::bf16}, {DType::e4m3, DType::e5m2, DType::bf16},
    {DType::e5m2, DType::e4m3, DType::bf16}, {DType::bf16, DType::bf16, DType::f32},
    {DType::e4m3, DType::e4m3, DType::f32},  {DType::e5m2, DType::e4m3, DType::f32},
};

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32:
    case DType::tf32: return CUDA_R_32F;
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    default: raise_config(fmt::format("GEMM: no cuBLASLt type for {}", dtype_name(t)));
  }
}

std::string supported_list() {
  std::string s;
  for (const auto& t : kTypes)
    s += fmt::format("{}{}->{}", s.empty() ? "" : ", ", gemm_types_name(t.a, t.b), dtype_name(t.d));
  return s;
}

template <class V>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  TB_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <class V>
V algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  V value{};
  size_t written = 0;
  TB_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

bool aligned256(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 256 == 0; }

}  // namespace

std::span<const GemmTypes> gemm_type_combos() { return kTypes; }

std::string gemm_types_name(DType a, DType b) {
  return a == b ? std::string(dtype_name(a)) : fmt::format("{}x{}", dtype_name(a), dtype_name(b));
}

std::string_view gemm_layout_name(GemmLayout l) {
  switch (l) {
    case GemmLayout::abt: return "abt";
    case GemmLayout::ab: return "ab";
    case GemmLayout::atb: return "atb";
  }
  return "?";
}

std::string describe(const GemmShape& s) {
  return fmt::format("{}->{} m={} n={} k={}{}{}{}{}{}{}{}", gemm_types_name(s.a, s.b), dtype_name(s.d), s.m, s.n, s.k,
                     s.fast_accum ? " fast_accum" : "", s.layout == GemmLayout::abt ? "" : " ",
                     s.layout == GemmLayout::abt ? std::string_view() : gemm_layout_name(s.layout),
                     s.accumulate ? " accumulate" : "", s.sm_target > 0 ? fmt::format(" sms {}", s.sm_target) : "",
                     s.lda > 0 ? fmt::format(" lda {}", s.lda) : "", s.ldd > 0 ? fmt::format(" ldd {}", s.ldd) : "");
}

namespace {
// Elements of our A's rows: k for [m,k] (abt, ab), m for [k,m] (atb).
std::int64_t a_row(const GemmShape& s) { return s.layout == GemmLayout::atb ? s.m : s.k; }
}  // namespace

void check_gemm_shape(const GemmShape& s) {
  TB_REQUIRE(s.m >= 1 && s.n >= 1 && s.k >= 1,
             fmt::format("GEMM {}: every dimension must be at least 1", describe(s)));
  TB_REQUIRE(s.sm_target >= 0, fmt::format("GEMM {}: sm_target must be >= 0 (0: the whole GPU)", describe(s)));
  TB_REQUIRE((s.lda == 0 || s.lda >= a_row(s)) && (s.ldd == 0 || s.ldd >= s.n),
             fmt::format("GEMM {}: a leading dimension below its rows' length", describe(s)));
  TB_REQUIRE(!s.strided() || !is_fp8(s.a), fmt::format("GEMM {}: fp8 GEMMs take dense rows only", describe(s)));
  TB_REQUIRE(!(s.a == DType::e5m2 && s.b == DType::e5m2),
             "cuBLASLt has no e5m2 x e5m2 GEMM; use e4m3 or e4m3xe5m2");
  const bool known = std::any_of(std::begin(kTypes), std::end(kTypes),
                                 [&](const GemmTypes& t) { return t.a == s.a && t.b == s.b && t.d == s.d; });
  TB_REQUIRE(known, fmt::format("GEMM {}: unsupported types; supported are {}", describe(s), supported_list()));
  const bool fp8 = is_fp8(s.a);
  TB_REQUIRE(fp8 || !s.fast_accum,
             fmt::format("GEMM {}: fast_accum applies to fp8 GEMMs only; turn it off", describe(s)));
  TB_REQUIRE(!fp8 || s.layout == GemmLayout::abt,
             fmt::format("GEMM {}: fp8 GEMMs support the abt layout only (Hopper FP8 tensor cores are TN-only); "
                         "make transposed fp8 copies of the operands",
                         describe(s)));
  TB_REQUIRE(s.layout == GemmLayout::abt || s.layout == GemmLayout::ab || s.layout == GemmLayout::atb,
             fmt::format("GEMM {}: unknown layout", describe(s)));
  TB_REQUIRE(!fp8 || (s.k % 16 == 0 && s.n % 16 == 0),
             fmt::format("GEMM {}: fp8 GEMMs need k and n to be multiples of 16 (FP8 tensor-core kernels need "
                         "16-byte aligned rows: A and B rows hold k elements, D rows n); pad the shape",
                         describe(s)));
}

std::string GemmAlgo::describe() const {
  return fmt::format("algo {} tile {} stages {} splitK {}", id, tile, stages, splitk);
}

GemmPlan::GemmPlan(cublasLtHandle_t lt, const GemmShape& s, std::size_t workspace_bytes) : s_(s), lt_(lt) {
  check_gemm_shape(s);
  const auto compute = s.a == DType::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  TB_CHECK(cublasLtMatmulDescCreate(desc_.out(), compute, CUDA_R_32F));
  // cuBLAS's A is our B, cuBLAS's B is our A (see gemm.h). Column-major views of our row-major buffers:
  // (rows, cols, leading dimension).
  const bool b_nk = s.layout == GemmLayout::abt;  // our B stored [n,k] (else [k,n])
  const bool a_mk = s.layout != GemmLayout::atb;  // our A stored [m,k] (else [k,m])
  set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_TRANSA, b_nk ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_TRANSB, a_mk ? CUBLAS_OP_N : CUBLAS_OP_T);
  if (is_fp8(s.a)) set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, std::int8_t(s.fast_accum ? 1 : 0));
  if (s.sm_target > 0) set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, std::int32_t(s.sm_target));

  if (b_nk)
    TB_CHECK(cublasLtMatrixLayoutCreate(lay_a_.out(), cuda_type(s.b), s.k, s.n, s.k));  // our B [n,k]
  else
    TB_CHECK(cublasLtMatrixLayoutCreate(lay_a_.out(), cuda_type(s.b), s.n, s.k, s.n));  // our B [k,n]
  const std::int64_t lda = s.lda > 0 ? s.lda : a_row(s), ldd = s.ldd > 0 ? s.ldd : s.n;
  if (a_mk)
    TB_CHECK(cublasLtMatrixLayoutCreate(lay_b_.out(), cuda_type(s.a), s.k, s.m, lda));  // our A [m,k]
  else
    TB_CHECK(cublasLtMatrixLayoutCreate(lay_b_.out(), cuda_type(s.a), s.m, s.k, lda));  // our A [k,m]
  TB_CHECK(cublasLtMatrixLayoutCreate(lay_d_.out(), cuda_type(s.d), s.n, s.m, ldd));  // our D [m,n] (and C)

  if (is_fp8(s.a)) {  // one unit scale, used for both operands until run() is given others
    float* unit = nullptr;
    TB_CHECK(cudaMalloc(reinterpret_cast<void**>(&unit), sizeof(float)));
    unit_scales_ = std::shared_ptr<float>(unit, [](float* p) { cudaFree(p); });
    const float one = 1.0f;
    TB_CHECK(cudaMemcpy(unit, &one, sizeof(one), cudaMemcpyHostToDevice));
    scales_set_ = {unit, unit};
    set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(unit));
    set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(unit));
  }

  LtOwned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
  TB_CHECK(cublasLtMatmulPreferenceCreate(pref.out()));
  const std::uint64_t max_ws = workspace_bytes;
  TB_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                sizeof(max_ws)));
  if (s.strided()) {  // a block of a wider tensor starts 16-byte aligned only: algorithms that take it
    const std::uint32_t align = 16;
    for (const auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      TB_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, &align, sizeof(align)));
  }
  candidates_.resize(kCandidates);
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, desc_.get(), lay_a_.get(), lay_b_.get(), lay_d_.get(),
                                                           lay_d_.get(), pref.get(), kCandidates, candidates_.data(),
                                                           &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (ok(st) && found == 0))
    raise_error(Error::Kind::cublas,
                fmt::format("no cuBLASLt algorithm for {} m={} n={} k={} (-> {}{}, workspace {} MiB, cuBLASLt {}); "
                            "try another shape or type",
                            gemm_types_name(s.a, s.b), s.m, s.n, s.k, dtype_name(s.d),
                            s.fast_accum ? ", fast_accum" : "", workspace_bytes >> 20, cublaslt_version()));
  TB_CHECK(st);
  candidates_.resize(found);
  select(0);
}

void GemmPlan::select(int rank) {
  TB_REQUIRE(rank >= 0 && rank < candidates(),
             fmt::format("GEMM {}: no algorithm candidate {} (the heuristic offered {})", describe(s_), rank,
                         candidates()));
  const auto& result = candidates_[rank];
  algo_ = result.algo;
  info_.id = algo_attr<std::int32_t>(algo_, CUBLASLT_ALGO_CONFIG_ID);
  info_.tile = algo_attr<std::uint32_t>(algo_, CUBLASLT_ALGO_CONFIG_TILE_ID);
  info_.stages = algo_attr<std::uint32_t>(algo_, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  info_.splitk = algo_attr<std::int32_t>(algo_, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  info_.workspace_bytes = result.workspaceSize;
  info_.rank = rank;
  info_.candidates = candidates();
}

void GemmPlan::run(void* d, const void* a, const void* b, Workspace ws, cudaStream_t stream, GemmScales scales,
                   float alpha) const {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  TB_REQUIRE(s_.strided() ? aligned16(d) && aligned16(a) && aligned16(b)
                          : aligned256(d) && aligned256(a) && aligned256(b),
             fmt::format("GEMM {}: d, a and b must be {}-byte aligned device buffers, as the algorithm was chosen for",
                         describe(s_), s_.strided() ? 16 : 256));
  TB_REQUIRE(ws.bytes >= info_.workspace_bytes && (ws.ptr || info_.workspace_bytes == 0),
             fmt::format("GEMM {}: the plan needs {} bytes of workspace, got {}", describe(s_), info_.workspace_bytes,
                         ws.bytes));
  if (unit_scales_) {  // fp8: null scales mean the plan's unit scales
    if (!scales.a) scales.a = unit_scales_.get();
    if (!scales.b) scales.b = unit_scales_.get();
    TB_REQUIRE(reinterpret_cast<std::uintptr_t>(scales.a) % 16 == 0 && reinterpret_cast<std::uintptr_t>(scales.b) % 16 == 0,
               fmt::format("GEMM {}: fp8 scale pointers must be 16-byte aligned (cuBLASLt rejects others); keep each "
                           "scale in its own allocation or slot (ops::DeviceScales)",
                           describe(s_)));
  }
  if (scales.a != scales_set_.a || scales.b != scales_set_.b) {
    TB_REQUIRE(is_fp8(s_.a), fmt::format("GEMM {}: per-tensor scales apply to fp8 GEMMs only", describe(s_)));
    // cuBLAS's A is our B and the other way round.
    set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(scales.b));
    set_attr(desc_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(scales.a));
    scales_set_ = scales;
  }
  const float beta = s_.accumulate ? 1.0f : 0.0f;  // beta = 0: C (given as D) is not read
  TB_CHECK(cublasLtMatmul(lt_, desc_.get(), &alpha, b, lay_a_.get(), a, lay_b_.get(), &beta, d, lay_d_.get(), d,
                          lay_d_.get(), &algo_, ws.ptr, ws.bytes, stream));
}

GemmCheck verify_gemm(const GemmShape& s, const void* d, const void* a, const void* b, double a_scale,
                      double b_scale, std::span<const GemmIndex> elements, cudaStream_t stream) {
  TB_REQUIRE(!s.accumulate, fmt::format("verify_gemm: GEMM {}: an accumulating GEMM's D holds C + A·B and C is "
                                         "gone; verify a non-accumulating run of the same product",
                                         describe(s)));
  // Host copies of each needed k-vector, fetched once: row i of A (op(A)), column j of op(B), row i of D.
  // A k-vector is a row of a [.., k] buffer, or a column (stride `cols` elements) of a [k, cols] one.
  using Rows = std::map<std::int64_t, std::vector<unsigned char>>;
  Rows a_rows, b_rows, d_rows;
  auto fetch = [&](Rows& rows, const void* base, DType t, std::int64_t index, std::int64_t len, bool column,
                   std::int64_t cols) {
    auto [it, fresh] = rows.try_emplace(index);
    if (!fresh) return;
    const std::size_t size = dtype_size(t);
    it->second.resize(std::size_t(len) * size);
    const auto* src = static_cast<const unsigned char*>(base);
    if (!column)
      TB_CHECK(cudaMemcpyAsync(it->second.data(), src + std::size_t(index) * std::size_t(len) * size,
                               std::size_t(len) * size, cudaMemcpyDeviceToHost, stream));
    else
      TB_CHECK(cudaMemcpy2DAsync(it->second.data(), size, src + std::size_t(index) * size, std::size_t(cols) * size,
                                 size, std::size_t(len), cudaMemcpyDeviceToHost, stream));
  };
  const bool a_column = s.layout == GemmLayout::atb, b_column = s.layout != GemmLayout::abt;
  for (const auto& e : elements) {
    TB_REQUIRE(e.i >= 0 && e.i < s.m && e.j >= 0 && e.j < s.n,
               fmt::format("verify_gemm: element [{},{}] is outside D [{},{}]", e.i, e.j, s.m, s.n));
    fetch(a_rows, a, s.a, e.i, s.k, a_column, s.m);
    fetch(d_rows, d, s.d, e.i, s.n, false, 0);
    fetch(b_rows, b, s.b, e.j, s.k, b_column, s.n);
  }
  TB_CHECK(cudaStreamSynchronize(stream));

  GemmCheck check;
  for (const auto& e : elements) {
    const DotRef ref = dot_ref(s.a, a_rows[e.i].data(), s.b, b_rows[e.j].data(), s.k, a_scale, b_scale);
    const double got = load_as_double(s.d, d_rows[e.i].data(), std::size_t(e.j));
    check.add(e, got, ref.value, gemm_tolerance(s.a, s.b, s.d, s.fast_accum, s.k, ref));
  }
  return check;
}

}  // namespace tb::ops
