// ops/cuda/grouped_gemm_cutlass.cuh: one CUTLASS 3.x sm90 pointer-array grouped GEMM per (family, configuration)
// of grouped_gemm_kernels.h, the only place that includes CUTLASS. Per group g, fp32 accumulate:
//   D_g[M,N] = alpha_g * A_g[M,K] · B_g[K,N] + beta * D_g
// GroupProblemShape with device-side shapes only (no host copy of the sizes: the persistent tile scheduler
// launches one CTA per SM and walks the groups' tiles on the device); the TMA descriptors are rewritten per group
// inside the kernel, so Params are built once over the plan's fixed arrays and run() only launches.
// TB_GROUPED_GEMM_DEFINE(family, config) is the body of each generated instance file.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <memory>
#include <string>

#include "core/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/grouped_gemm_kernels.h"

namespace tb::ops::grouped {

using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

template <class A, class LayA, class B, class LayB, class D, bool Fast = false>
struct FamilyTypes {
  using ElementA = A;
  using LayoutA = LayA;
  using ElementB = B;
  using LayoutB = LayB;
  using ElementD = D;
  static constexpr bool kFastAccum = Fast;
};

using bf16_t = cutlass::bfloat16_t;
using e4m3_t = cutlass::float_e4m3_t;
using e5m2_t = cutlass::float_e5m2_t;

template <Family F> struct FamilyTraits;
template <> struct FamilyTraits<Family::bf16_tn_bf16> : FamilyTypes<bf16_t, RowMajor, bf16_t, ColumnMajor, bf16_t> {};
template <> struct FamilyTraits<Family::bf16_tt_bf16> : FamilyTypes<bf16_t, RowMajor, bf16_t, RowMajor, bf16_t> {};
template <> struct FamilyTraits<Family::bf16_nt_bf16> : FamilyTypes<bf16_t, ColumnMajor, bf16_t, RowMajor, bf16_t> {};
template <> struct FamilyTraits<Family::bf16_nt_f32> : FamilyTypes<bf16_t, ColumnMajor, bf16_t, RowMajor, float> {};
template <>
struct FamilyTraits<Family::e4m3_tn_bf16_fast> : FamilyTypes<e4m3_t, RowMajor, e4m3_t, ColumnMajor, bf16_t, true> {};
template <> struct FamilyTraits<Family::e4m3_tn_bf16> : FamilyTypes<e4m3_t, RowMajor, e4m3_t, ColumnMajor, bf16_t> {};
template <>
struct FamilyTraits<Family::e4m3xe5m2_tn_bf16> : FamilyTypes<e4m3_t, RowMajor, e5m2_t, ColumnMajor, bf16_t> {};
template <>
struct FamilyTraits<Family::e5m2xe4m3_tn_bf16> : FamilyTypes<e5m2_t, RowMajor, e4m3_t, ColumnMajor, bf16_t> {};
template <> struct FamilyTraits<Family::e4m3_tn_f32> : FamilyTypes<e4m3_t, RowMajor, e4m3_t, ColumnMajor, float> {};
template <>
struct FamilyTraits<Family::e5m2xe4m3_tn_f32> : FamilyTypes<e5m2_t, RowMajor, e4m3_t, ColumnMajor, float> {};

// Schedule, CTA tile (M x N; K is 128 bytes of the input type) and cluster (along M).
template <bool Cooperative, int TileN, int ClusterM>
struct ConfigShape {
  static constexpr bool kCooperative = Cooperative;
  static constexpr int kTileN = TileN;
  using Cluster = cute::Shape<cute::Int<ClusterM>, cute::_1, cute::_1>;
};
template <GroupedGemmConfig C> struct ConfigTraits;
template <> struct ConfigTraits<GroupedGemmConfig::coop_128x128_c1> : ConfigShape<true, 128, 1> {};
template <> struct ConfigTraits<GroupedGemmConfig::coop_128x256_c1> : ConfigShape<true, 256, 1> {};
template <> struct ConfigTraits<GroupedGemmConfig::coop_128x256_c2> : ConfigShape<true, 256, 2> {};
template <> struct ConfigTraits<GroupedGemmConfig::pingpong_128x128_c1> : ConfigShape<false, 128, 1> {};
template <> struct ConfigTraits<GroupedGemmConfig::pingpong_128x128_c2> : ConfigShape<false, 128, 2> {};

template <Family F, GroupedGemmConfig C>
struct Kernel {
  using T = FamilyTraits<F>;
  using Cfg = ConfigTraits<C>;
  using ElementA = typename T::ElementA;
  using ElementB = typename T::ElementB;
  using ElementD = typename T::ElementD;
  static constexpr int kAlignA = 16 / sizeof(ElementA);  // elements in 16 bytes (TMA)
  static constexpr int kAlignB = 16 / sizeof(ElementB);
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using TileShape = cute::Shape<cute::_128, cute::Int<Cfg::kTileN>, cute::Int<128 / sizeof(ElementA)>>;
  using ClusterShape = typename Cfg::Cluster;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;

  using KernelSchedule = std::conditional_t<
      Cfg::kCooperative,
      std::conditional_t<T::kFastAccum, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>,
      std::conditional_t<T::kFastAccum, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>>;
  using EpilogueSchedule = std::conditional_t<Cfg::kCooperative, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementD, RowMajor*, kAlignD, ElementD, RowMajor*,
      kAlignD, EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, typename T::LayoutA*, kAlignA, ElementB,
      typename T::LayoutB*, kAlignB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  // Arrays holds each stride as its one dynamic leading dimension and each shape as three ints.
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideC = typename GemmKernel::InternalStrideC;
  using StrideD = typename GemmKernel::InternalStrideD;
  static_assert(sizeof(StrideA) == sizeof(std::int64_t) && sizeof(StrideB) == sizeof(std::int64_t) &&
                sizeof(StrideC) == sizeof(std::int64_t) && sizeof(StrideD) == sizeof(std::int64_t));
  static_assert(sizeof(typename ProblemShape::UnderlyingProblemShape) == 3 * sizeof(int));
};

template <Family F, GroupedGemmConfig C>
class CutlassRunner final : public Runner {
  using K = Kernel<F, C>;

 public:
  CutlassRunner(int device, const Arrays& x, GroupedGemmRaster raster) {
    typename K::Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    using RasterOptions = typename K::GemmKernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order =
        raster == GroupedGemmRaster::along_n ? RasterOptions::AlongN : RasterOptions::AlongM;
    args.problem_shape = {x.groups, reinterpret_cast<typename K::ProblemShape::UnderlyingProblemShape*>(x.shapes),
                          nullptr};
    args.mainloop = {reinterpret_cast<const typename K::ElementA**>(x.a), reinterpret_cast<typename K::StrideA*>(x.lda),
                     reinterpret_cast<const typename K::ElementB**>(x.b), reinterpret_cast<typename K::StrideB*>(x.ldb)};
    auto& fusion = args.epilogue.thread;
    fusion.alpha_ptr_array = x.alpha;  // one alpha per group
    fusion.dAlpha = {cute::_0{}, cute::_0{}, 1};
    fusion.beta_ptr = x.beta;  // one beta for all (0: C is not read)
    fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
    args.epilogue.ptr_C = reinterpret_cast<const typename K::ElementD**>(x.c);
    args.epilogue.dC = reinterpret_cast<typename K::StrideC*>(x.ldd);
    args.epilogue.ptr_D = reinterpret_cast<typename K::ElementD**>(x.d);
    args.epilogue.dD = reinterpret_cast<typename K::StrideD*>(x.ldd);
    args.hw_info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<typename K::GemmKernel>(device);

    check(K::Gemm::can_implement(args), "can_implement");
    workspace_ = DeviceBuffer(device, std::max<std::size_t>(K::Gemm::get_workspace_size(args), 256));
    check(gemm_.initialize(args, workspace_.get()), "initialize");
  }

  void run(cudaStream_t stream) override { check(gemm_.run(stream), "run"); }

 private:
  static void check(cutlass::Status s, const char* what) {
    if (s != cutlass::Status::kSuccess)
      raise_error(Error::Kind::cuda, std::string("grouped GEMM: CUTLASS ") + what + " failed: " +
                                         cutlassGetStatusString(s) + " (" + cudaGetErrorString(cudaGetLastError()) +
                                         ")");
  }
  DeviceBuffer workspace_;
  typename K::Gemm gemm_;
};

}  // namespace tb::ops::grouped

#define TB_GROUPED_GEMM_DEFINE(family, config)                                                             \
  namespace tb::ops::grouped {                                                                             \
  std::unique_ptr<Runner> make_##family##_##config(int device, const Arrays& arrays,                      \
                                                   GroupedGemmRaster raster) {                             \
    return std::make_unique<CutlassRunner<Family::family, GroupedGemmConfig::config>>(device, arrays,      \
                                                                                      raster);             \
  }                                                                                                        \
  }
