// Tests LoRA on one GPU against the CPU reference (ops/cpu/lora.h, ops/cpu/linear.h in double) on random inputs:
//   - the dropout kernels (ops/cuda/lora.h): the mask of every element equals the CPU's for the same stream, the rows'
//     tokens (a context-parallel rank's chunks, a micro-batch past the step's first sequences) and a row-parallel
//     rank's column offset (an even one with whole 8-column packs: the packed kernel; odd: one element per thread);
//     kept values scaled by dropout_keep_scale(p) ≈ 1 / (1 - p); the backward adds exactly the kept elements;
//   - the fused products with the dropout drawn inside (ops/cuda/lora.h lora_down, lora_grad_a, lora_input_grad) for
//     ranks 8, 16 and 32, more adapters than one launch takes, rows past a whole tile and chunk, columns past a whole
//     block, a context-parallel rank's rows and a row-parallel rank's col0, dA written or added in fp32 or bf16, dx
//     added or written; dz and dB from one read of dy (lora_out_grad), dB written or added;
//   - a frozen LinearCuda with adapters (model/lora_cuda.h) in BF16: the column-parallel fused qkv with canonical q, k,
//     v adapters (blocks of its output, written through a leading dimension; or q and v only, which leave a block to
//     the base alone) and the row-parallel out with one, dropout off and on, both backward orders: y = x W^T + s Σ
//     dropout(x) A^T B^T, and dx, dA, dB of a random dy within bf16 tolerances (relative L2 2e-2), y and dx starting
//     as garbage; the frozen weight gets no gradient (its bytes in the gradient buffer stay as they were).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/sysinfo.h"
#include "core/counter_rng.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/decoder_cuda.h"
#include "model/linear_cuda.h"
#include "model/param_layout.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/lora.h"
#include "ops/cuda/context.h"
#include "ops/cuda/lora.h"

namespace {

using namespace tb::model;
using tb::ops::DeviceBuffer;
using bf16 = __nv_bfloat16;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

std::vector<double> random_bf16_values(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = tb::bf16_to_float(tb::float_to_bf16(float(u(g))));
  return v;
}

DeviceBuffer upload_bf16(const std::vector<double>& v) {
  std::vector<std::uint16_t> bits(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) bits[i] = tb::float_to_bf16(float(v[i]));
  DeviceBuffer b(0, std::max<std::size_t>(bits.size(), 1) * 2);
  TB_CHECK(cudaMemcpy(b.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  return b;
}

std::vector<double> download_bf16(const void* p, std::size_t n) {
  std::vector<std::uint16_t> bits(n);
  TB_CHECK(cudaMemcpy(bits.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = tb::bf16_to_float(bits[i]);
  return out;
}

std::vector<double> download_f32(const void* p, std::size_t n) {
  std::vector<float> f(n);
  TB_CHECK(cudaMemcpy(f.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return {f.begin(), f.end()};
}

double rel_l2(const std::vector<double>& want, const std::vector<double>& got) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

// cols a multiple of 8 (the kernel of 8-column packs) or not (one element per thread)
void check_dropout(std::int64_t cols) {
  SCOPED_TRACE("cols " + std::to_string(cols));
  tb::ops::DeviceContext dc(0);
  // a cp rank 1 of 2: its rows are [2 sequences, chunks 1 and 2 of 4 of 64 tokens]; a row-parallel rank 1 of 2
  const int seq_full = 64, cp = 2, cp_rank = 1, batch = 2, seq = seq_full / cp;
  const std::int64_t rows = batch * seq, col0 = cols, first_sequence = 6;
  const float p = 0.3f;
  const auto x = random_bf16_values(std::size_t(rows * cols), 1), t = random_bf16_values(std::size_t(rows * cols), 2);
  const auto dx0 = random_bf16_values(std::size_t(rows * cols), 3);
  const std::size_t elems = std::size_t(rows * cols);
  DeviceBuffer dx_in = upload_bf16(x), dt = upload_bf16(t), ddx = upload_bf16(dx0), dxd(0, elems * 2);
  DeviceBuffer dstep(0, 8);
  const std::int64_t step = 5;
  TB_CHECK(cudaMemcpy(dstep.get(), &step, 8, cudaMemcpyHostToDevice));
  tb::ops::LoraMask m{1234, dstep.as<std::int64_t>(), p, {first_sequence, seq, seq_full, cp, cp_rank, col0, 2 * cols}};
  tb::ops::lora_dropout(dxd.as<bf16>(), dx_in.as<bf16>(), rows, cols, m, dc.stream());
  tb::ops::lora_dropout_add(ddx.as<bf16>(), dt.as<bf16>(), rows, cols, m, dc.stream());
  dc.synchronize();
  const auto xd = download_bf16(dxd.get(), elems), dx = download_bf16(ddx.get(), elems);
  std::vector<std::int64_t> index;  // the CPU's token index of each row (parallel/decoder_cpu_parallel's)
  const int c = seq_full / (2 * cp);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < seq; ++j)
      index.push_back((first_sequence + b) * seq_full + (j < c ? cp_rank * c + j : (2 * cp - 1 - cp_rank) * c + j - c));
  const tb::ops::cpu::DropoutMask cpu{tb::step_stream(1234, step), index, col0, 2 * cols, p};
  int kept = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::size_t e = std::size_t(i * cols + j);
      const bool keep = cpu.keeps(i, j);
      kept += keep;
      ASSERT_EQ(xd[e] != 0, keep && x[e] != 0) << i << "," << j;
      EXPECT_NEAR(xd[e], keep ? x[e] / (1 - p) : 0.0, 1e-2 * std::abs(x[e]) + 1e-6);
      EXPECT_NEAR(dx[e], dx0[e] + (keep ? t[e] / (1 - p) : 0.0), 2e-2 * (std::abs(dx0[e]) + std::abs(t[e])) + 1e-6);
    }
  EXPECT_NEAR(double(kept) / double(rows * cols), 1 - p, 0.05);
}

TEST(LoraCuda, DropoutDrawsTheCpuMask) {
  SKIP_WITHOUT_GPU();
  check_dropout(40);
  check_dropout(13);
}

// overwrite: dA written (else added); add_dx: dx += the input gradient (else written over what dx held)
void check_fused(int r, int count, tb::DType grad_type, bool overwrite, bool add_dx) {
  SCOPED_TRACE("rank " + std::to_string(r) + ", " + std::to_string(count) + " adapters, " +
               (grad_type == tb::DType::f32 ? "fp32" : "bf16") + (overwrite ? " written" : " added") +
               (add_dx ? ", dx added" : ", dx written"));
  tb::ops::DeviceContext dc(0);
  // cp rank 1 of 2: 7 sequences of 44 rows (308: a partial 16-row tile and a second 256-row chunk); row-parallel
  // rank 2 of 3: 288 columns (a 256-column block and a part of one) from col0 576
  const int seq_full = 88, cp = 2, cp_rank = 1, batch = 7, seq = seq_full / cp;
  const std::int64_t rows = batch * seq, cols = 288, col0 = 2 * cols, first_sequence = 5, step = 9;
  const float p = 0.3f, scale = 1.7f;
  const std::size_t xn = std::size_t(rows * cols), an = std::size_t(r) * std::size_t(cols),
                    zn = std::size_t(rows) * std::size_t(r);
  const auto x = random_bf16_values(xn, 21), a = random_bf16_values(an * std::size_t(count), 22, 0.5),
             dz = random_bf16_values(zn * std::size_t(count), 23), dx0 = random_bf16_values(xn, 24),
             g0 = random_bf16_values(an * std::size_t(count), 25);
  DeviceBuffer dxin = upload_bf16(x), da = upload_bf16(a), ddz = upload_bf16(dz), ddx = upload_bf16(dx0),
               dzout(0, zn * std::size_t(count) * 2), dstep(0, 8),
               ws(0, tb::ops::lora_grad_a_workspace_bytes(rows, cols, count, r));
  DeviceBuffer dgrad = grad_type == tb::DType::f32 ? DeviceBuffer(0, g0.size() * 4) : upload_bf16(g0);
  if (grad_type == tb::DType::f32) {
    const std::vector<float> f(g0.begin(), g0.end());
    TB_CHECK(cudaMemcpy(dgrad.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  }
  TB_CHECK(cudaMemcpy(dstep.get(), &step, 8, cudaMemcpyHostToDevice));
  const std::size_t gsize = grad_type == tb::DType::f32 ? 4 : 2;
  tb::ops::LoraGroup out, back;  // z_k written; dz_k read
  out.count = back.count = count, out.r = back.r = r;
  for (int k = 0; k < count; ++k) {
    out.a[k] = back.a[k] = da.as<bf16>() + std::size_t(k) * an;
    out.seed[k] = back.seed[k] = 100 + std::uint64_t(k);
    out.z[k] = dzout.as<bf16>() + std::size_t(k) * zn;
    back.z[k] = ddz.as<bf16>() + std::size_t(k) * zn;
    back.grad[k] = static_cast<std::byte*>(dgrad.get()) + std::size_t(k) * an * gsize;
  }
  const tb::ops::LoraMask m{
      0, dstep.as<std::int64_t>(), p, {first_sequence, seq, seq_full, cp, cp_rank, col0, 3 * cols}};
  tb::ops::lora_down(out, dxin.as<bf16>(), rows, cols, m, dc.stream());
  tb::ops::lora_grad_a(back, dxin.as<bf16>(), rows, cols, m, scale, grad_type, overwrite, ws.get(), dc.stream());
  tb::ops::lora_input_grad(ddx.as<bf16>(), back, rows, cols, m, scale, add_dx, dc.stream());
  dc.synchronize();
  const auto z_got = download_bf16(dzout.get(), zn * std::size_t(count)), dx_got = download_bf16(ddx.get(), xn);
  const auto g_got = grad_type == tb::DType::f32 ? download_f32(dgrad.get(), g0.size())
                                                 : download_bf16(dgrad.get(), g0.size());

  std::vector<std::int64_t> index;
  const int c = seq_full / (2 * cp);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < seq; ++j)
      index.push_back((first_sequence + b) * seq_full + (j < c ? cp_rank * c + j : (2 * cp - 1 - cp_rank) * c + j - c));
  std::vector<double> z_want(z_got.size()), g_want(g0.size()), dx_want = dx0;
  for (int k = 0; k < count; ++k) {
    const tb::ops::cpu::DropoutMask mk{tb::step_stream(100 + std::uint64_t(k), step), index, col0, 3 * cols, p};
    std::vector<double> xd(xn), t(xn);
    tb::ops::cpu::lora_dropout_forward<double>({xd.data(), {rows, cols}}, {x.data(), {rows, cols}}, mk);
    using View = tb::TensorView<double>;
    using CView = tb::TensorView<const double>;
    const CView ak(a.data() + std::size_t(k) * an, {r, cols}), dzk(dz.data() + std::size_t(k) * zn, {rows, r}),
        xdv(xd.data(), {rows, cols});
    tb::ops::cpu::linear_forward<double>(View(z_want.data() + std::size_t(k) * zn, {rows, r}), xdv, ak);  // xd A^T
    std::vector<double> dak(an);  // dz^T xd, and t = dz A
    tb::ops::cpu::linear_backward<double>(View(t.data(), {rows, cols}), View(dak.data(), {r, cols}), {}, dzk, xdv, ak);
    for (std::size_t e = 0; e < an; ++e) {
      const std::size_t i = std::size_t(k) * an + e;
      g_want[i] = (overwrite ? 0.0 : g0[i]) + scale * dak[e];
    }
    for (double& v : t) v *= scale;
    tb::ops::cpu::lora_dropout_backward<double>({dx_want.data(), {rows, cols}}, {t.data(), {rows, cols}}, mk);
  }
  EXPECT_LT(rel_l2(z_want, z_got), 1e-2) << "z";
  EXPECT_LT(rel_l2(g_want, g_got), 1e-2) << "dA";
  std::vector<double> ddx_want(xn), ddx_got(xn);  // what was added to dx, or written
  for (std::size_t i = 0; i < xn; ++i)
    ddx_want[i] = dx_want[i] - dx0[i], ddx_got[i] = add_dx ? dx_got[i] - dx0[i] : dx_got[i];
  EXPECT_LT(rel_l2(ddx_want, ddx_got), 2e-2) << "dx";
}

TEST(LoraCuda, FusedProductsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  check_fused(8, 3, tb::DType::f32, false, true);
  check_fused(16, 2, tb::DType::bf16, true, true);
  check_fused(32, 4, tb::DType::f32, true, true);
  check_fused(8, 4, tb::DType::f32, true, false);    // dx written by one launch
  check_fused(32, 3, tb::DType::bf16, false, false);  // by two (2 + 1 adapters): the first writes, the second adds
}

// The output side in one read of dy (ops/cuda/lora.h lora_out_grad): adapters on blocks of a wider dy (a partial
// column block; rows past a tile and over several chunks), dz written and dB written or added, in fp32 or bf16.
void check_out(int r, int count, tb::DType grad_type, bool overwrite) {
  SCOPED_TRACE("out grad, rank " + std::to_string(r) + ", " + std::to_string(count) + " adapters, " +
               (grad_type == tb::DType::f32 ? "fp32" : "bf16") + (overwrite ? " written" : " added"));
  tb::ops::DeviceContext dc(0);
  const std::int64_t rows = 1000, widths[] = {520, 264, 1024, 8}, gap = 16;
  const float scale = 1.3f;
  tb::ops::LoraOutputs g;
  g.count = count, g.r = r;
  std::int64_t ld = gap, bn = 0;
  for (int k = 0; k < count; ++k) g.col0[k] = ld, g.cols[k] = widths[k], ld += widths[k] + gap, bn += widths[k] * r;
  const std::size_t zn = std::size_t(rows * r);
  const auto dy = random_bf16_values(std::size_t(rows * ld), 31), b = random_bf16_values(std::size_t(bn), 32, 0.5),
             z = random_bf16_values(zn * std::size_t(count), 33), g0 = random_bf16_values(std::size_t(bn), 34);
  DeviceBuffer ddy = upload_bf16(dy), db = upload_bf16(b), dzin = upload_bf16(z), ddz(0, zn * std::size_t(count) * 2),
               ws(0, tb::ops::lora_out_grad_workspace_bytes(g, rows));
  DeviceBuffer dgrad = grad_type == tb::DType::f32 ? DeviceBuffer(0, g0.size() * 4) : upload_bf16(g0);
  if (grad_type == tb::DType::f32) {
    const std::vector<float> f(g0.begin(), g0.end());
    TB_CHECK(cudaMemcpy(dgrad.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  }
  const std::size_t gsize = grad_type == tb::DType::f32 ? 4 : 2;
  std::size_t at = 0;
  for (int k = 0; k < count; ++k) {
    g.b[k] = db.as<bf16>() + at, g.grad[k] = static_cast<std::byte*>(dgrad.get()) + at * gsize;
    g.z[k] = dzin.as<bf16>() + std::size_t(k) * zn, g.dz[k] = ddz.as<bf16>() + std::size_t(k) * zn;
    at += std::size_t(g.cols[k] * r);
  }
  tb::ops::lora_out_grad(g, ddy.as<bf16>(), rows, ld, scale, grad_type, overwrite, ws.get(), dc.stream());
  dc.synchronize();
  const auto dz_got = download_bf16(ddz.get(), zn * std::size_t(count));
  const auto g_got = grad_type == tb::DType::f32 ? download_f32(dgrad.get(), g0.size())
                                                 : download_bf16(dgrad.get(), g0.size());
  std::vector<double> dz_want(dz_got.size()), g_want(g0.size());
  at = 0;
  for (int k = 0; k < count; ++k) {  // dx = dy W and dW += dy^T x with W = B_k, x = z_k
    const std::size_t n = std::size_t(g.cols[k] * r);
    std::vector<double> dbk(n);
    using View = tb::TensorView<double>;
    using CView = tb::TensorView<const double>;
    tb::ops::cpu::linear_backward<double>(View(dz_want.data() + std::size_t(k) * zn, {rows, r}),
                                          View(dbk.data(), {g.cols[k], r}), {},
                                          CView(dy.data() + g.col0[k], tb::Shape{rows, g.cols[k]}, tb::Shape{ld, 1}, 2),
                                          CView(z.data() + std::size_t(k) * zn, {rows, r}),
                                          CView(b.data() + at, {g.cols[k], r}));
    for (std::size_t e = 0; e < n; ++e) g_want[at + e] = (overwrite ? 0.0 : g0[at + e]) + scale * dbk[e];
    at += n;
  }
  EXPECT_LT(rel_l2(dz_want, dz_got), 1e-2) << "dz";
  EXPECT_LT(rel_l2(g_want, g_got), 1e-2) << "dB";
}

TEST(LoraCuda, OutputSideMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_out(8, 3, tb::DType::f32, false);
  check_out(16, 2, tb::DType::bf16, true);
  check_out(32, 4, tb::DType::f32, true);
}

// A tiny model's layer-0 linear `which` (qkv or out) with its LoRA adapters, run alone against the CPU; y and dx
// start as random garbage (LoRA writes them first where its adapters cover y / its input gradient is fused or has no
// dropout; else the base GEMMs write them). after_dgrad: the backward that runs dx first (then the callback).
void check_linear(bool qkv, double dropout, unsigned targets = kLoraCanonical, bool after_dgrad = false) {
  SCOPED_TRACE(std::string(qkv ? "qkv" : "out") + ", dropout " + std::to_string(dropout) + ", targets " +
               lora_targets_name(targets) + (after_dgrad ? ", dx first" : ""));
  ModelConfig cfg = preset("small");  // d 256, heads 4 x 64, kv 2 x 64, ffn 768
  cfg.layers = 1;
  cfg.lora = {.rank = 8, .alpha = 24, .dropout = dropout, .targets = targets, .seed = 77};
  const DenseLayout L = dense_layout(cfg);
  const DenseLayout::Layer& l = L.layers[0];
  const int slot = qkv ? l.qkv : l.out;
  const LinearCuda lin(L, slot, l.lora(slot), cfg.lora);
  const Slot& w = L.slots[std::size_t(slot)];
  const std::int64_t in = w.shape[1], out = w.shape[0], r = cfg.lora.rank, seq = 32, batch = 2, n = batch * seq;
  const double s = cfg.lora.scale();
  ASSERT_EQ(lin.lora().count(), qkv ? std::size_t(std::popcount(targets & (kLoraQ | kLoraK | kLoraV))) : 1u);
  ASSERT_FALSE(lin.trainable());

  tb::ops::DeviceContext dc(0);
  auto params = random_bf16_values(L.total, 11, 0.1);
  DeviceBuffer dparams = upload_bf16(params);
  const std::vector<double> grads0 = random_bf16_values(L.grad_total, 12);  // accumulated onto
  std::vector<float> g32(grads0.begin(), grads0.end());
  DeviceBuffer dgrads(0, L.grad_total * 4);
  TB_CHECK(cudaMemcpy(dgrads.get(), g32.data(), g32.size() * 4, cudaMemcpyHostToDevice));
  const auto x = random_bf16_values(std::size_t(n * in), 13), dy = random_bf16_values(std::size_t(n * out), 14);
  DeviceBuffer dx_in = upload_bf16(x), ddy = upload_bf16(dy), dyout = upload_bf16(random_bf16_values(dy.size(), 15)),
               ddx = upload_bf16(random_bf16_values(x.size(), 16));
  DeviceBuffer z(0, lin.lora().saved_bytes(n)), dz(0, lin.lora().saved_bytes(n)),
      ws(0, std::max<std::size_t>(lin.lora().workspace_bytes(n), 1)), t(0, std::size_t(n * in) * 2), dstep(0, 8);
  const std::int64_t step = 3, first_sequence = 4;
  TB_CHECK(cudaMemcpy(dstep.get(), &step, 8, cudaMemcpyHostToDevice));
  const Fp8Options fp8;
  const TensorParallelOps tp;
  const std::function<void(std::string_view)> mark;
  LinearEnv e{dc, fp8, tp, dparams.as<bf16>(), dgrads.get(), tb::DType::f32, false, nullptr, nullptr, nullptr,
              nullptr, nullptr, mark};
  e.lora_ws = ws.get(), e.lora_t = t.as<bf16>(), e.lora_dz = dz.as<bf16>(), e.step = dstep.as<std::int64_t>();
  e.rows = {first_sequence, int(seq), int(seq), 1, 0, 0, 0};
  LinearSaved saved;
  saved.lora_z = z.as<bf16>();
  lin.forward(e, dyout.as<bf16>(), dx_in.as<bf16>(), saved, n);
  bool called = false;
  lin.backward(e, ddx.as<bf16>(), ddy.as<bf16>(), dx_in.as<bf16>(), saved, n,
               after_dgrad ? std::function<void()>([&] { called = true; }) : std::function<void()>());
  dc.synchronize();
  EXPECT_EQ(called, after_dgrad);

  // The reference in double.
  using View = tb::TensorView<double>;
  using CView = tb::TensorView<const double>;
  std::vector<double> y(std::size_t(n * out)), dx(std::size_t(n * in)), grads = grads0;
  tb::ops::cpu::linear_forward<double>(View(y.data(), {n, out}), CView(x.data(), {n, in}),
                                       CView(params.data() + w.offset, {out, in}));
  tb::ops::cpu::linear_backward<double>(View(dx.data(), {n, in}), {}, {}, CView(dy.data(), {n, out}),
                                        CView(x.data(), {n, in}), CView(params.data() + w.offset, {out, in}));
  std::vector<std::int64_t> index;
  for (std::int64_t i = 0; i < n; ++i) index.push_back(first_sequence * seq + i);
  for (const Adapter& ad : l.lora(slot)) {
    const Slot &a = L.slots[std::size_t(ad.a)], &b = L.slots[std::size_t(ad.b)];
    const tb::ops::cpu::DropoutMask m{tb::step_stream(slot_seed(cfg.lora.seed, a.name), step), index, 0, in, dropout};
    std::vector<double> xdrop(x.size()), zc(std::size_t(n * r)), dxd(x.size());
    tb::ops::cpu::lora_dropout_forward<double>(View(xdrop.data(), {n, in}), CView(x.data(), {n, in}), m);
    const auto block = [&](std::vector<double>& v) {
      return View(v.data() + ad.row0, tb::Shape{n, ad.rows}, tb::Shape{out, 1}, 2);
    };
    tb::ops::cpu::lora_forward<double>(block(y), View(zc.data(), {n, r}), CView(xdrop.data(), {n, in}),
                                       CView(params.data() + a.offset, {r, in}),
                                       CView(params.data() + b.offset, {ad.rows, r}), s);
    std::vector<double> dyc = dy;
    tb::ops::cpu::lora_backward<double>(View(dxd.data(), {n, in}), View(grads.data() + a.grad_offset, {r, in}),
                                        View(grads.data() + b.grad_offset, {ad.rows, r}), block(dyc),
                                        CView(xdrop.data(), {n, in}), CView(zc.data(), {n, r}),
                                        CView(params.data() + a.offset, {r, in}),
                                        CView(params.data() + b.offset, {ad.rows, r}), s);
    tb::ops::cpu::lora_dropout_backward<double>(View(dx.data(), {n, in}), CView(dxd.data(), {n, in}), m);
  }
  const char* what = qkv ? "qkv" : "out";
  EXPECT_LT(rel_l2(y, download_bf16(dyout.get(), y.size())), 2e-2) << what << " y";
  EXPECT_LT(rel_l2(dx, download_bf16(ddx.get(), dx.size())), 2e-2) << what << " dx";
  const std::vector<double> g = download_f32(dgrads.get(), L.grad_total);
  for (const Adapter& ad : l.lora(slot))
    for (int f : {ad.a, ad.b}) {
      const Slot& sl = L.slots[std::size_t(f)];
      std::vector<double> want, got;
      for (std::size_t i = 0; i < sl.size; ++i) {
        want.push_back(grads[sl.grad_offset + i] - grads0[sl.grad_offset + i]);
        got.push_back(g[sl.grad_offset + i] - grads0[sl.grad_offset + i]);
      }
      EXPECT_LT(rel_l2(want, got), 2e-2) << sl.name;
    }
  for (std::size_t i = 0; i < g.size(); ++i)  // the other layers' adapters (none here) and nothing else moved
    if (g[i] != float(grads0[i]) && grads[i] == grads0[i]) ADD_FAILURE() << "gradient element " << i << " written";
}

TEST(LoraCuda, ColumnParallelQkvWithThreeAdaptersMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_linear(true, 0.0);
  check_linear(true, 0.2);
  check_linear(true, 0.2, kLoraCanonical, true);
  check_linear(true, 0.0, kLoraQ | kLoraV);  // k's block of y has no adapter: the base GEMM writes y first
  check_linear(true, 0.2, kLoraQ | kLoraV, true);
}

TEST(LoraCuda, RowParallelOutMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  check_linear(false, 0.0);
  check_linear(false, 0.2);
}

}  // namespace
