// Tests micro/membw_kernels on a GPU: copy and triad write what they should everywhere (odd sizes
// included, output poisoned first); write fills; bytes-per-call formula.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "bench/sysinfo.h"
#include "core/error.h"
#include "micro/membw_kernels.h"

using tb::micro::MemKernel;

namespace {
struct Buf {
  float* p = nullptr;
  explicit Buf(size_t n) { TB_CHECK(cudaMalloc(&p, n * sizeof(float))); }
  ~Buf() { cudaFree(p); }
  std::vector<float> host(size_t n) const {
    std::vector<float> h(n);
    TB_CHECK(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
};
}  // namespace

TEST(MembwBytes, Formula) {
  EXPECT_DOUBLE_EQ(tb::micro::membw_bytes(MemKernel::copy, 1000), 8000);
  EXPECT_DOUBLE_EQ(tb::micro::membw_bytes(MemKernel::read, 1000), 4000);
  EXPECT_DOUBLE_EQ(tb::micro::membw_bytes(MemKernel::write, 1000), 4000);
  EXPECT_DOUBLE_EQ(tb::micro::membw_bytes(MemKernel::triad, 1000), 12000);
}

TEST(MembwGpu, CopyTriadWriteAreCorrect) {
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason();
  int sms = 0;
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (size_t n : {size_t(4), size_t(4 * 1013), size_t(1) << 24}) {
    Buf a(n), b(n), c(n);
    tb::micro::fill_membw(a.p, n, 1.25f, nullptr);
    tb::micro::fill_membw(b.p, n, -3.0f, nullptr);
    TB_CHECK(cudaMemset(c.p, 0xff, n * sizeof(float)));  // NaN poison
    tb::micro::launch_membw(MemKernel::triad, a.p, b.p, c.p, n, sms, nullptr);
    const auto ha = a.host(n), hb = b.host(n), hc = c.host(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hc[i], ha[i] + 0.5f * hb[i]) << "triad n=" << n << " i=" << i;
    TB_CHECK(cudaMemset(b.p, 0xff, n * sizeof(float)));
    tb::micro::launch_membw(MemKernel::copy, a.p, b.p, c.p, n, sms, nullptr);
    const auto hcopy = b.host(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hcopy[i], ha[i]) << "copy n=" << n << " i=" << i;
    tb::micro::launch_membw(MemKernel::write, a.p, b.p, c.p, n, sms, nullptr);
    const auto hw = b.host(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hw[i], 1.5f) << "write n=" << n << " i=" << i;
    tb::micro::launch_membw(MemKernel::read, a.p, b.p, c.p, n, sms, nullptr);
    TB_CHECK(cudaDeviceSynchronize());
  }
}
