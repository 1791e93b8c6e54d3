// bench/lab/attention_fp8_lab.cpp: cuDNN's causal GQA attention in bf16 (ops/cuda/attention.h) against FP8
// (ops/cuda/attention_fp8.h), forward and backward, at one shape (default Llama 3.1 8B: b=1, s=8192, H=32, G=8,
// d=128), plus the casts the FP8 path adds in a decoder (the bf16 fused QKV buffer to E4M3 and dO to the gradient
// format, one pass each: ops/cuda/fp8.h, delayed scaling). A lab, not part of trainbench: the question before
// --fp8-attention goes into the decoder (is it faster, and by how much once the casts are paid?).
// Timed through bench/loop.h (median of 20 after 5 warmup). TFLOP/s in the causal convention
// (attention_flops(s, true)): forward 2 b H s^2 d, backward twice that (the model's count; the kernels also
// recompute Q K^T). Inputs are random (bf16 uniform in [-2, 2]; FP8 codes uniform over the format's range); the
// FP8 outputs use unit scales and P kPScale: values do not change which kernel runs, and none overflows.
// Not timed: turning the FP8 dq, dk, dv back into bf16 for RoPE's backward (one more pass over the dQKV bytes).
// Usage: attention_fp8_lab [s=8192] [H=32] [G=8] [d=128] [b=1] [grad=e5m2|e4m3]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp8.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cudnn.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/fp8.h"

namespace {

// One device float per 256 bytes (the Fp8Scales layout).
enum Slot : int {
  kQkvDescale, kDoutDescale, kOScale, kODescale, kOAmax, kSScale, kSDescale, kSAmax, kDpScale, kDpDescale, kDpAmax,
  kDqScale, kDkScale, kDvScale, kDqAmax, kDkAmax, kDvAmax, kCastScale, kCastScaleInv, kCastAmax, kSlots
};
constexpr std::size_t kSlotFloats = 64;

}  // namespace

int main(int argc, char** argv) {
  using namespace tb;
  const auto arg = [&](int i, long def) { return std::int64_t(argc > i ? std::atol(argv[i]) : def); };
  const std::int64_t s = arg(1, 8192), H = arg(2, 32), G = arg(3, 8), d = arg(4, 128), b = arg(5, 1);
  const DType grad = argc > 6 ? parse_dtype(argv[6]).value_or(DType::e5m2) : DType::e5m2;
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  const ops::AttentionShape bs = ops::fused_qkv_attention(b, s, H, G, d);
  const ops::Fp8AttentionShape fs{bs, grad};
  const std::size_t qkv_n = ops::fused_qkv_elements(bs), o_n = std::size_t(b * s * H * d);
  const std::size_t lse_bytes = std::size_t(b * H * s) * sizeof(float);

  // bf16
  ops::DeviceBuffer qkv(0, qkv_n * 2), o(0, o_n * 2), lse(0, lse_bytes), dout(0, o_n * 2), dqkv(0, qkv_n * 2);
  ops::fill_uniform(qkv.get(), DType::bf16, qkv_n, 1, -2, 2, st);
  ops::fill_uniform(dout.get(), DType::bf16, o_n, 2, -1, 1, st);
  const ops::QkvPointers in = ops::split_fused_qkv(qkv.get(), bs), gr = ops::split_fused_qkv(dqkv.get(), bs);
  const ops::AttentionForwardArgs bf_fwd{in.q, in.k, in.v, o.get(), lse.as<float>()};
  const ops::AttentionBackwardArgs bf_bwd{in.q, in.k, in.v, o.get(), dout.get(), lse.as<float>(), gr.q, gr.k, gr.v};

  // fp8
  const float gmax = float(dtype_max(grad));
  ops::DeviceBuffer qkv8(0, qkv_n), o8(0, o_n), lse8(0, lse_bytes), dout8(0, o_n), dqkv8(0, qkv_n);
  ops::DeviceBuffer slots(0, kSlots * kSlotFloats * sizeof(float));
  ops::fill_uniform(qkv8.get(), DType::e4m3, qkv_n, 3, -448, 448, st);
  ops::fill_uniform(dout8.get(), grad, o_n, 4, -gmax, gmax, st);
  std::vector<float> host(kSlots * kSlotFloats, 1.0f);
  host[kQkvDescale * kSlotFloats] = 2.0f / 448.0f;
  host[kDoutDescale * kSlotFloats] = 1.0f / gmax;
  host[kSScale * kSlotFloats] = ops::kPScale;
  host[kSDescale * kSlotFloats] = 1.0f / ops::kPScale;
  TB_CHECK(cudaMemcpyAsync(slots.get(), host.data(), slots.bytes(), cudaMemcpyHostToDevice, st));
  const auto at = [&](Slot i) { return slots.as<float>() + std::size_t(i) * kSlotFloats; };
  const ops::QkvPointers in8 = ops::split_fused_qkv_fp8(qkv8.get(), bs);
  const ops::QkvPointers gr8 = ops::split_fused_qkv_fp8(dqkv8.get(), bs);
  ops::Fp8AttentionForwardArgs f8_fwd;
  f8_fwd.q = {in8.q, at(kQkvDescale)}, f8_fwd.k = {in8.k, at(kQkvDescale)}, f8_fwd.v = {in8.v, at(kQkvDescale)};
  f8_fwd.o = {o8.get(), at(kOScale), at(kOAmax)};
  f8_fwd.lse = lse8.as<float>();
  f8_fwd.s = {at(kSScale), at(kSDescale), at(kSAmax)};
  ops::Fp8AttentionBackwardArgs f8_bwd;
  f8_bwd.q = f8_fwd.q, f8_bwd.k = f8_fwd.k, f8_bwd.v = f8_fwd.v;
  f8_bwd.o = {o8.get(), at(kODescale)};
  f8_bwd.dout = {dout8.get(), at(kDoutDescale)};
  f8_bwd.lse = lse8.as<float>();
  f8_bwd.s = {at(kSScale), at(kSDescale), nullptr};
  f8_bwd.dp = {at(kDpScale), at(kDpDescale), at(kDpAmax)};
  f8_bwd.dq = {gr8.q, at(kDqScale), at(kDqAmax)};
  f8_bwd.dk = {gr8.k, at(kDkScale), at(kDkAmax)};
  f8_bwd.dv = {gr8.v, at(kDvScale), at(kDvAmax)};

  // The casts a decoder adds: bf16 QKV [b*s, (H+2G) d] -> E4M3, bf16 dO [b*s, H d] -> grad (delayed: *scale read).
  ops::Fp8CastArgs cast_qkv;
  cast_qkv.x = qkv.as<__nv_bfloat16>(), cast_qkv.rows = b * s, cast_qkv.cols = (H + 2 * G) * d;
  cast_qkv.q = qkv8.get(), cast_qkv.type = DType::e4m3;
  cast_qkv.scale = at(kCastScale), cast_qkv.scale_inv = at(kCastScaleInv), cast_qkv.amax_out = at(kCastAmax);
  ops::Fp8CastArgs cast_dout = cast_qkv;
  cast_dout.x = dout.as<__nv_bfloat16>(), cast_dout.cols = H * d, cast_dout.q = dout8.get(), cast_dout.type = grad;

  ops::CudnnAttention bf(0);
  ops::CudnnFp8Attention f8(0);
  std::printf("cuDNN %s\n%s\n", ops::cudnn_version().c_str(), bf.plan(bs).describe().c_str());
  try {
    std::printf("%s\n", f8.plan(fs).describe().c_str());
  } catch (const Error& e) {
    std::printf("fp8 attention not available here: %s\n", e.what());
    return 1;
  }
  bf.forward(bs, bf_fwd, st);  // lse and o for the backward
  f8.forward(fs, f8_fwd, st);
  dc.synchronize();

  const ops::AttentionFlops fl = ops::attention_flops(bs, /*causal=*/true);
  const auto median_ms = [&](const std::function<void()>& body) { return bench::median_ms(0, st, body, 5, 20); };
  const double bf_f = median_ms([&] { bf.forward(bs, bf_fwd, st); });
  const double bf_b = median_ms([&] { bf.backward(bs, bf_bwd, st); });
  const double f8_f = median_ms([&] { f8.forward(fs, f8_fwd, st); });
  const double f8_b = median_ms([&] { f8.backward(fs, f8_bwd, st); });
  const double c_qkv = median_ms([&] { ops::fp8_cast(cast_qkv, st); });
  const double c_do = median_ms([&] { ops::fp8_cast(cast_dout, st); });

  const auto tflops = [](double flop, double ms) { return flop / ms * 1e-9; };
  std::printf("attention %s, causal TFLOP/s (forward %.3g TFLOP, backward %.3g)\n", ops::describe(fs).c_str(),
              fl.forward * 1e-12, fl.backward * 1e-12);
  std::printf("%-22s %9s %8s %9s %8s %8s\n", "", "bf16 ms", "TFLOP/s", "fp8 ms", "TFLOP/s", "speedup");
  const auto row = [&](const char* name, double flop, double t_bf, double t_f8) {
    std::printf("%-22s %9.3f %8.0f %9.3f %8.0f %7.2fx\n", name, t_bf, tflops(flop, t_bf), t_f8, tflops(flop, t_f8),
                t_bf / t_f8);
  };
  row("forward", fl.forward, bf_f, f8_f);
  row("backward", fl.backward, bf_b, f8_b);
  row("forward+backward", fl.forward + fl.backward, bf_f + bf_b, f8_f + f8_b);
  row("  + casts (qkv, dO)", fl.forward + fl.backward, bf_f + bf_b, f8_f + f8_b + c_qkv + c_do);
  std::printf("casts: qkv -> e4m3 %.3f ms, dO -> %s %.3f ms\n", c_qkv, std::string(dtype_name(grad)).c_str(), c_do);
  return 0;
}
