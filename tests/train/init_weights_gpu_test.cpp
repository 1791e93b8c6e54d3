// Tests that `--device cpu` and `--device cuda` start from the same weights: the CUDA trainer's parts (topology,
// replica, optimizer) draw the initial weights of `small` and `small-gpt` (tied) on the GPU, and every bf16 weight is
// the CPU decoder's fp32 initial value (model::init_params, what CpuDecoder and the sharded CPU decoder load) rounded
// as the master weights round it: to nearest, ties away from zero (split master, ops/cuda/master_split.h) or to
// nearest even (fp32 master). The device's logf /
// cosf may differ from the host's in the last fp32 bit, so a weight may sit one bf16 step away, rarely.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "ops/cuda/context.h"
#include "ops/cuda/master_split.h"
#include "train/optimizer_cuda.h"
#include "train/replica_cuda.h"
#include "train/topology_cuda.h"
#include "train/trainer.h"

namespace tb::train {
namespace {

TEST(InitWeights, CudaStartsFromTheCpuWeights) {
  if (bench::visible_gpu_count() == 0) GTEST_SKIP() << bench::no_gpu_reason();
  for (const char* preset : {"small", "small-gpt"})
    for (const tb::train::Master master : {tb::train::Master::split, tb::train::Master::f32}) {
      TrainSpec spec;
      spec.model.preset = preset, spec.run.device = tb::train::Device::cuda, spec.model.layers = 2,
      spec.model.seq = 128, spec.optimizer.master = master;
      spec.run.seed = 20261203;
      const model::ModelConfig m = resolve_model(spec);
      ops::DeviceContext dc(0);
      TopologyCuda topo(comm::World{}, mesh_shape(spec, 1), 0, dc.stream(), m.tied_embeddings);
      ReplicaCuda rep(dc, spec, topo, m, m, std::size_t(spec.model.seq), 1);
      OptimizerCuda opt(dc, spec, m, rep, false);
      opt.init_weights(spec.run.seed);
      const std::vector<float> gpu = rep.net().params_to_host();

      const model::DenseLayout L = model::dense_layout(m);
      std::vector<float> cpu(L.total);
      model::init_params<float>(cpu, L, spec.run.seed);
      ASSERT_EQ(gpu.size(), cpu.size());
      std::size_t exact = 0, off = 0;
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        const std::uint16_t want =
            spec.optimizer.master == tb::train::Master::split ? ops::split_master(cpu[i]).hi : float_to_bf16(cpu[i]);
        const float expect = bf16_to_float(want);
        if (gpu[i] == expect) {
          ++exact;
          continue;
        }
        ++off;
        ASSERT_LE(std::fabs(gpu[i] - expect), std::ldexp(std::fabs(expect), -7) + 1e-30f)
            << preset << " " << tb::train::name(master) << " element " << i << ": gpu " << gpu[i] << " cpu " << cpu[i];
      }
      EXPECT_GE(double(exact), 0.999 * double(cpu.size()))
          << preset << " " << tb::train::name(master) << ": " << off << " differ";
    }
}

}  // namespace
}  // namespace tb::train
