// ops/cuda/grouped_gemm.cpp: see grouped_gemm.h. Validation, the kernel table and the default configurations, and
// the plan: one device allocation for the per-group arrays (strides and alpha pointers written once here, the rest by
// the prepare kernel before each GEMM) and the CUTLASS kernel built over them.
#include "ops/cuda/grouped_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/cuda/grouped_gemm_instances.h"
#include "ops/cuda/grouped_gemm_kernels.h"

namespace tb::ops {
namespace grouped {  // defined in the generated instance files (grouped_gemm_cutlass.cuh)
#define TB_GROUPED_GEMM_DECLARE(family, config) \
  std::unique_ptr<Runner> make_##family##_##config(int device, const Arrays& arrays, GroupedGemmRaster raster);
TB_GROUPED_GEMM_DEFAULTS(TB_GROUPED_GEMM_DECLARE)
#if TB_GROUPED_GEMM_LAB_CONFIGS
TB_GROUPED_GEMM_LAB(TB_GROUPED_GEMM_DECLARE)
#endif
#undef TB_GROUPED_GEMM_DECLARE
}  // namespace grouped

namespace {

using grouped::Family;

struct FamilyTypes {
  Family family;
  DType a, b, d;
  bool fast_accum;
};
constexpr FamilyTypes kFp8Families[] = {
    {Family::e4m3_tn_bf16_fast, DType::e4m3, DType::e4m3, DType::bf16, true},
    {Family::e4m3_tn_bf16, DType::e4m3, DType::e4m3, DType::bf16, false},
    {Family::e4m3xe5m2_tn_bf16, DType::e4m3, DType::e5m2, DType::bf16, false},
    {Family::e5m2xe4m3_tn_bf16, DType::e5m2, DType::e4m3, DType::bf16, false},
    {Family::e4m3_tn_f32, DType::e4m3, DType::e4m3, DType::f32, false},
    {Family::e5m2xe4m3_tn_f32, DType::e5m2, DType::e4m3, DType::f32, false},
};

constexpr std::string_view kSupported =
    "bf16->bf16 (abt, ab, atb), bf16->f32 (atb), e4m3->bf16, e4m3xe5m2->bf16, e5m2xe4m3->bf16, e4m3->f32, "
    "e5m2xe4m3->f32 (every layout; fast_accum with e4m3->bf16 only)";

// The kernel family of a shape, or none when unsupported.
std::optional<Family> family_of(const GroupedGemmShape& s) {
  if (s.a == DType::bf16 && s.b == DType::bf16 && !s.fast_accum) {
    switch (s.layout) {
      case GemmLayout::abt: return s.d == DType::bf16 ? std::optional(Family::bf16_tn_bf16) : std::nullopt;
      case GemmLayout::ab: return s.d == DType::bf16 ? std::optional(Family::bf16_tt_bf16) : std::nullopt;
      case GemmLayout::atb:
        if (s.d == DType::bf16) return Family::bf16_nt_bf16;
        if (s.d == DType::f32) return Family::bf16_nt_f32;
        return std::nullopt;
    }
    return std::nullopt;
  }
  for (const auto& f : kFp8Families)
    if (f.a == s.a && f.b == s.b && f.d == s.d && f.fast_accum == s.fast_accum) return f.family;
  return std::nullopt;
}

// The compiled kernels (grouped_gemm_instances.h; a pair may be listed twice).
struct Instance {
  Family family;
  GroupedGemmConfig config;
  grouped::MakeRunner make;
};
#define TB_GROUPED_GEMM_ROW(family, config) {Family::family, GroupedGemmConfig::config, grouped::make_##family##_##config},
constexpr Instance kInstances[] = {
    TB_GROUPED_GEMM_DEFAULTS(TB_GROUPED_GEMM_ROW)
#if TB_GROUPED_GEMM_LAB_CONFIGS
    TB_GROUPED_GEMM_LAB(TB_GROUPED_GEMM_ROW)
#endif
};
#undef TB_GROUPED_GEMM_ROW

GroupedGemmConfig default_config(Family f) {
#define TB_GROUPED_GEMM_DEFAULT(family, config) \
  case Family::family: return GroupedGemmConfig::config;
  switch (f) { TB_GROUPED_GEMM_DEFAULTS(TB_GROUPED_GEMM_DEFAULT) }
#undef TB_GROUPED_GEMM_DEFAULT
  raise_error(Error::Kind::internal, "grouped GEMM: a kernel family without a default configuration");
}

const Instance* find_instance(Family f, GroupedGemmConfig c) {
  for (const auto& i : kInstances)
    if (i.family == f && i.config == c) return &i;
  return nullptr;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string describe(const GroupedGemmShape& s) {
  return fmt::format("{}->{} {} n={} k={} groups={} rows={}{}", gemm_types_name(s.a, s.b), dtype_name(s.d),
                     gemm_layout_name(s.layout), s.n, s.k, s.groups, s.rows, s.fast_accum ? " fast_accum" : "");
}

void check_grouped_gemm_shape(const GroupedGemmShape& s) {
  TB_REQUIRE(s.n >= 1 && s.k >= 1 && s.groups >= 1 && s.rows >= 1,
             fmt::format("grouped GEMM {}: n, k, groups and rows must be at least 1", describe(s)));
  TB_REQUIRE(s.n < (std::int64_t(1) << 31) && s.k < (std::int64_t(1) << 31) && s.rows < (std::int64_t(1) << 31),
             fmt::format("grouped GEMM {}: n, k and rows must be below 2^31 (CUTLASS's int problem shapes)",
                         describe(s)));
  TB_REQUIRE(s.layout == GemmLayout::abt || s.layout == GemmLayout::ab || s.layout == GemmLayout::atb,
             fmt::format("grouped GEMM {}: unknown layout", describe(s)));
  TB_REQUIRE(!(s.a == DType::e5m2 && s.b == DType::e5m2),
             fmt::format("grouped GEMM {}: there is no e5m2 x e5m2 GEMM; use e4m3 for one operand", describe(s)));
  const bool fp8 = is_fp8(s.a) || is_fp8(s.b);
  TB_REQUIRE(fp8 || !s.fast_accum,
             fmt::format("grouped GEMM {}: fast_accum applies to fp8 GEMMs only; turn it off", describe(s)));
  TB_REQUIRE(family_of(s).has_value(),
             fmt::format("grouped GEMM {}: unsupported types, layout or fast_accum; supported are {}", describe(s),
                         kSupported));
  const std::int64_t align = fp8 ? 16 : 8;  // 16 bytes per row for TMA
  TB_REQUIRE(s.n % align == 0 && s.k % align == 0,
             fmt::format("grouped GEMM {}: n and k must be multiples of {} ({} rows must start 16-byte aligned for "
                         "TMA); pad the weight",
                         describe(s), align, fp8 ? "fp8" : "bf16"));
  TB_REQUIRE(!(fp8 && s.layout == GemmLayout::atb) || s.rows % 16 == 0,
             fmt::format("grouped GEMM {}: the fp8 weight gradient reads transposes [n, rows] and [k, rows]: rows "
                         "must be a multiple of 16; round the transposes' row length up",
                         describe(s)));
}

std::string_view grouped_gemm_config_name(GroupedGemmConfig c) {
  switch (c) {
    case GroupedGemmConfig::coop_128x128_c1: return "coop_128x128_c1";
    case GroupedGemmConfig::coop_128x256_c1: return "coop_128x256_c1";
    case GroupedGemmConfig::coop_128x256_c2: return "coop_128x256_c2";
    case GroupedGemmConfig::pingpong_128x128_c1: return "pingpong_128x128_c1";
    case GroupedGemmConfig::pingpong_128x128_c2: return "pingpong_128x128_c2";
  }
  return "?";
}

GroupedGemmRaster grouped_gemm_default_raster(const GroupedGemmShape& s, GroupedGemmConfig config) {
  check_grouped_gemm_shape(s);
  if (s.layout != GemmLayout::atb) return GroupedGemmRaster::along_m;
  std::int64_t tile_n = 128;  // every configuration's tile is 128 rows of M
  switch (config) {
    case GroupedGemmConfig::coop_128x256_c1:
    case GroupedGemmConfig::coop_128x256_c2: tile_n = 256; break;
    case GroupedGemmConfig::coop_128x128_c1:
    case GroupedGemmConfig::pingpong_128x128_c1:
    case GroupedGemmConfig::pingpong_128x128_c2: break;
  }
  const std::int64_t tiles_m = (s.n + 127) / 128, tiles_n = (s.k + tile_n - 1) / tile_n;  // D_e [n, k]
  return tiles_m > tiles_n ? GroupedGemmRaster::along_n : GroupedGemmRaster::along_m;
}

GroupedGemmConfig grouped_gemm_default_config(const GroupedGemmShape& s) {
  check_grouped_gemm_shape(s);
  return default_config(*family_of(s));
}

std::vector<GroupedGemmConfig> grouped_gemm_configs(const GroupedGemmShape& s) {
  check_grouped_gemm_shape(s);
  std::vector<GroupedGemmConfig> out;
  for (const auto& i : kInstances)
    if (i.family == *family_of(s) && std::find(out.begin(), out.end(), i.config) == out.end()) out.push_back(i.config);
  return out;
}

GroupPointers::GroupPointers(int device, std::span<void* const> pointers)
    : buf_(device, std::max<std::size_t>(pointers.size_bytes(), 1)), size_(int(pointers.size())) {
  for (std::size_t i = 0; i < pointers.size(); ++i)
    TB_REQUIRE(pointers[i] && aligned16(pointers[i]),
               fmt::format("GroupPointers: pointer {} of {} is null or not 16-byte aligned (grouped GEMM operands "
                           "are read by TMA)",
                           i, pointers.size()));
  TB_CHECK(cudaMemcpy(buf_.get(), pointers.data(), pointers.size_bytes(), cudaMemcpyHostToDevice));
}

GroupedGemmPlan::GroupedGemmPlan(int device, const GroupedGemmShape& s, std::optional<GroupedGemmConfig> config,
                                 std::optional<GroupedGemmRaster> raster)
    : s_(s), device_(device) {
  check_grouped_gemm_shape(s);
  const Family family = *family_of(s);
  config_ = config.value_or(default_config(family));
  const Instance* inst = find_instance(family, config_);
  if (!inst) {
    std::string have;
    for (GroupedGemmConfig c : grouped_gemm_configs(s))
      have += fmt::format("{}{}", have.empty() ? "" : ", ", grouped_gemm_config_name(c));
    raise_config(fmt::format("grouped GEMM {}: configuration {} is not compiled for these types and layout; compiled "
                             "are {} (ops/cuda/grouped_gemm_instances.h lists them)",
                             describe(s), grouped_gemm_config_name(config_), have));
  }
  raster_ = raster.value_or(grouped_gemm_default_raster(s, config_));
  TB_CHECK(cudaSetDevice(device));
  int sms = 0;
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  prepare_blocks_ = 2 * sms;

  // One allocation: every array 256-byte aligned.
  const auto E = std::size_t(s.groups);
  std::size_t bytes = 0;
  auto place = [&](std::size_t size) {
    const std::size_t at = bytes;
    bytes += (size + 255) / 256 * 256;
    return at;
  };
  const std::size_t at_shapes = place(3 * sizeof(int) * E), at_a = place(sizeof(void*) * E),
                    at_b = place(sizeof(void*) * E), at_c = place(sizeof(void*) * E), at_d = place(sizeof(void*) * E),
                    at_lda = place(8 * E), at_ldb = place(8 * E), at_ldd = place(8 * E),
                    at_alpha_ptrs = place(sizeof(void*) * E), at_alpha = place(sizeof(float) * E),
                    at_beta = place(sizeof(float));
  arrays_buf_ = DeviceBuffer(device, bytes);
  auto* base = arrays_buf_.as<std::byte>();
  arrays_ = std::make_unique<grouped::Arrays>();
  grouped::Arrays& x = *arrays_;
  x.groups = s.groups;
  x.shapes = reinterpret_cast<int*>(base + at_shapes);
  x.a = reinterpret_cast<const void**>(base + at_a);
  x.b = reinterpret_cast<const void**>(base + at_b);
  x.c = reinterpret_cast<const void**>(base + at_c);
  x.d = reinterpret_cast<void**>(base + at_d);
  x.lda = reinterpret_cast<std::int64_t*>(base + at_lda);
  x.ldb = reinterpret_cast<std::int64_t*>(base + at_ldb);
  x.ldd = reinterpret_cast<std::int64_t*>(base + at_ldd);
  x.alpha = reinterpret_cast<const float**>(base + at_alpha_ptrs);
  x.alpha_values = reinterpret_cast<float*>(base + at_alpha);
  x.beta = reinterpret_cast<float*>(base + at_beta);

  // Leading dimensions (grouped_gemm.h's operand table, in CUTLASS's A [M,K], B [K,N], D [M,N]).
  const bool fp8 = is_fp8(s.a);
  std::int64_t lda = 0, ldb = 0, ldd = 0;
  switch (s.layout) {
    case GemmLayout::abt: lda = s.k, ldb = s.k, ldd = s.n; break;     // X [m,k], W [n,k], Y [m,n]
    case GemmLayout::ab: lda = s.n, ldb = fp8 ? s.n : s.k, ldd = s.k; break;  // dY [m,n], W [n,k] | Wt [k,n]
    case GemmLayout::atb:
      lda = fp8 ? s.rows : s.n, ldb = fp8 ? s.rows : s.k, ldd = s.k;  // dY [m,n] | dYt [n,R], X [m,k] | Xt [k,R]
      break;
  }
  std::vector<std::int64_t> host(3 * E);
  std::fill(host.begin(), host.begin() + E, lda);
  std::fill(host.begin() + E, host.begin() + 2 * E, ldb);
  std::fill(host.begin() + 2 * E, host.end(), ldd);
  TB_CHECK(cudaMemcpy(x.lda, host.data(), 8 * E, cudaMemcpyHostToDevice));
  TB_CHECK(cudaMemcpy(x.ldb, host.data() + E, 8 * E, cudaMemcpyHostToDevice));
  TB_CHECK(cudaMemcpy(x.ldd, host.data() + 2 * E, 8 * E, cudaMemcpyHostToDevice));
  std::vector<const float*> alpha_ptrs(E);
  for (std::size_t g = 0; g < E; ++g) alpha_ptrs[g] = x.alpha_values + g;
  TB_CHECK(cudaMemcpy(x.alpha, alpha_ptrs.data(), sizeof(void*) * E, cudaMemcpyHostToDevice));
  TB_CHECK(cudaMemset(base + at_shapes, 0, 3 * sizeof(int) * E));

  runner_ = inst->make(device, x, raster_);
}

GroupedGemmPlan::~GroupedGemmPlan() = default;
GroupedGemmPlan::GroupedGemmPlan(GroupedGemmPlan&&) noexcept = default;
GroupedGemmPlan& GroupedGemmPlan::operator=(GroupedGemmPlan&&) noexcept = default;

void GroupedGemmPlan::run(const GroupedGemmArgs& args, cudaStream_t stream) {
  const GroupedGemmShape& s = s_;
  const bool atb = s.layout == GemmLayout::atb, fp8 = is_fp8(s.a);
  TB_REQUIRE(args.start && args.count && args.a,
             fmt::format("grouped GEMM {}: start, count and a are required", describe(s)));
  TB_REQUIRE(atb ? (args.b && args.d_groups && !args.b_groups && !args.d)
                 : (args.b_groups && args.d && !args.b && !args.d_groups),
             fmt::format("grouped GEMM {}: {} takes {}", describe(s), gemm_layout_name(s.layout),
                         atb ? "b and d_groups (rows in, one gradient per group out), not b_groups or d"
                             : "b_groups and d (one weight per group in, rows out), not b or d_groups"));
  TB_REQUIRE(aligned16(args.a) && aligned16(args.b) && aligned16(args.d),
             fmt::format("grouped GEMM {}: a, b and d must be 16-byte aligned (TMA)", describe(s)));
  TB_REQUIRE(fp8 || (!args.a_scale && !args.b_scale),
             fmt::format("grouped GEMM {}: scales apply to fp8 GEMMs only", describe(s)));

  grouped::Prepare p;
  p.groups = s.groups;
  p.rows = s.rows;
  p.start = args.start;
  p.count = args.count;
  const std::int64_t sa = std::int64_t(dtype_size(s.a)), sb = std::int64_t(dtype_size(s.b)),
                     sd = std::int64_t(dtype_size(s.d));
  p.a = static_cast<const char*>(args.a);
  p.b = static_cast<const char*>(args.b);
  p.b_groups = args.b_groups;
  p.d = static_cast<char*>(args.d);
  p.d_groups = args.d_groups;
  switch (s.layout) {
    case GemmLayout::abt:  // {m, n, k}
      p.vary = 0, p.fixed[1] = int(s.n), p.fixed[2] = int(s.k);
      p.a_step = s.k * sa, p.d_step = s.n * sd;
      break;
    case GemmLayout::ab:  // {m, k, n}
      p.vary = 0, p.fixed[1] = int(s.k), p.fixed[2] = int(s.n);
      p.a_step = s.n * sa, p.d_step = s.k * sd;
      break;
    case GemmLayout::atb:  // {n, k, m}; fp8: columns of the transposes
      p.vary = 2, p.fixed[0] = int(s.n), p.fixed[1] = int(s.k);
      p.a_step = fp8 ? sa : s.n * sa, p.b_step = fp8 ? sb : s.k * sb;
      break;
  }
  p.a_scale = args.a_scale;
  p.b_scale = args.b_scale;
  p.b_scale_stride = atb ? 0 : 1;
  p.accumulate = args.accumulate;
  p.zero_bytes = atb && !args.accumulate ? s.n * s.k * sd : 0;
  grouped::prepare(p, *arrays_, prepare_blocks_, stream);
  runner_->run(stream);
}

}  // namespace tb::ops
