// ops/cuda/grouped_gemm_instances.h: which grouped GEMM kernels are compiled, as X(family, config) lists
// (families: grouped_gemm_kernels.h; configurations: GroupedGemmConfig). src/ops/CMakeLists.txt reads these lists and
// generates one source file per pair, so each CUTLASS instantiation compiles on its own (in parallel, cached).
//   TB_GROUPED_GEMM_DEFAULTS: each family's configuration, the one a plan runs unless told otherwise: the place to set
//     the winners of bench/lab/grouped_gemm_lab.cu (any configuration listed; a new one compiles with the next build).
//   TB_GROUPED_GEMM_LAB: the configurations the lab compares for the families it measures (BF16 forward, data
//     gradient, weight gradient in fp32 and, accumulated, in bf16; FP8 forward, e5m2 data gradient, e5m2 weight
//     gradient in fp32), compiled only when the CMake option TB_GROUPED_GEMM_LAB_CONFIGS is on (off by default; on
//     adds 27 compilations).
// Keep one X(...) per line, as below: CMake reads them by that pattern.
#pragma once

#define TB_GROUPED_GEMM_DEFAULTS(X)          \
  X(bf16_tn_bf16, coop_128x256_c1)           \
  X(bf16_tt_bf16, coop_128x256_c1)           \
  X(bf16_nt_bf16, coop_128x256_c1)           \
  X(bf16_nt_f32, coop_128x256_c1)            \
  X(e4m3_tn_bf16_fast, coop_128x256_c1)      \
  X(e4m3_tn_bf16, coop_128x256_c1)           \
  X(e4m3xe5m2_tn_bf16, coop_128x256_c1)      \
  X(e5m2xe4m3_tn_bf16, coop_128x256_c1)      \
  X(e4m3_tn_f32, coop_128x256_c1)            \
  X(e5m2xe4m3_tn_f32, coop_128x256_c1)

#define TB_GROUPED_GEMM_LAB(X)               \
  X(bf16_tn_bf16, coop_128x128_c1)           \
  X(bf16_tn_bf16, coop_128x256_c1)           \
  X(bf16_tn_bf16, coop_128x256_c2)           \
  X(bf16_tn_bf16, pingpong_128x128_c1)       \
  X(bf16_tn_bf16, pingpong_128x128_c2)       \
  X(bf16_tt_bf16, coop_128x128_c1)           \
  X(bf16_tt_bf16, coop_128x256_c1)           \
  X(bf16_tt_bf16, coop_128x256_c2)           \
  X(bf16_tt_bf16, pingpong_128x128_c1)       \
  X(bf16_tt_bf16, pingpong_128x128_c2)       \
  X(bf16_nt_bf16, coop_128x128_c1)           \
  X(bf16_nt_bf16, pingpong_128x128_c1)       \
  X(bf16_nt_bf16, pingpong_128x128_c2)       \
  X(bf16_nt_f32, coop_128x128_c1)            \
  X(bf16_nt_f32, coop_128x256_c1)            \
  X(bf16_nt_f32, coop_128x256_c2)            \
  X(bf16_nt_f32, pingpong_128x128_c1)        \
  X(bf16_nt_f32, pingpong_128x128_c2)        \
  X(e4m3_tn_bf16_fast, coop_128x128_c1)      \
  X(e4m3_tn_bf16_fast, coop_128x256_c1)      \
  X(e4m3_tn_bf16_fast, coop_128x256_c2)      \
  X(e4m3_tn_bf16_fast, pingpong_128x128_c1)  \
  X(e4m3_tn_bf16_fast, pingpong_128x128_c2)  \
  X(e5m2xe4m3_tn_bf16, coop_128x128_c1)      \
  X(e5m2xe4m3_tn_bf16, coop_128x256_c1)      \
  X(e5m2xe4m3_tn_bf16, coop_128x256_c2)      \
  X(e5m2xe4m3_tn_bf16, pingpong_128x128_c1)  \
  X(e5m2xe4m3_tn_bf16, pingpong_128x128_c2)  \
  X(e5m2xe4m3_tn_f32, coop_128x128_c1)       \
  X(e5m2xe4m3_tn_f32, coop_128x256_c1)       \
  X(e5m2xe4m3_tn_f32, coop_128x256_c2)       \
  X(e5m2xe4m3_tn_f32, pingpong_128x128_c1)   \
  X(e5m2xe4m3_tn_f32, pingpong_128x128_c2)
