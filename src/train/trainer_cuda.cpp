// train/trainer_cuda.cpp: the training loop of trainer.h on one GPU. Per optimizer step, all on one stream:
//   H2D: tokens and targets of the step's `accum` micro-batches, lr and t     (from pinned host memory)
//   FP8 (spec.precision): the weights' FP8 copies, then after the micro-batches the delayed-scaling update
//   grads = 0 (the linear layers' by their first GEMM writing, beta 0);  for each micro-batch a: loss[a] = forward_backward(tokens[a], grad_scale 1/accum)
//   norm, clip = grad_norm(grads, max_norm);  AdamW(master, m, v -> bf16 weights) with clip, lr, t
//   D2H: loss[0..accum), norm                                                  (into pinned host memory)
// Step 1 runs eagerly (plans every GEMM and attention shape); then (with spec.autotune) every GEMM shape is autotuned
// (bench/gemm_tune.h) and the same enqueue is captured once as a CUDA graph and replayed, the host writing the next step's inputs into the pinned buffers between replays. Each step
// is timed by the host clock (launch to completion) and by CUDA events around it.
// Pipeline parallel (--pp, train/pipeline_cuda.h): each rank's decoder is its stage (layers [r L/pp, (r+1) L/pp),
// parameters of that stage only); the micro-batch loop becomes the rank's 1F1B schedule (sends and receives through
// NCCL on the pipeline's own stream, train/pipeline_cuda.h), the loss is summed over the pipeline ranks (only the
// last stage's is non-zero) and so is the gradient norm's sum of squares; AdamW updates the stage's parameters.
// Interleaved (--vp > 1): the rank holds vp decoders, chunk c = global stage c·pp + r of pp·vp, run by the interleaved
// schedule; the optimizer's tensors, the gradient norm and the FP8 / gradient-zeroing step hooks cover every chunk.
// Mixes (docs/PARALLEL.md): one NCCL communicator per mesh group; each chunk has its tensor- and data-parallel objects;
// the reductions run per group in turn (tp, then pp, then dp x cp).
// Memory: weights bf16 2P + gradients fp32 4P (--grads bf16: 2P) + master 2P (split: the residual halves; f32: 4P) + moments 8P
// (bf16: 4P) + the activation arena
// + workspaces, estimated and checked against the GPU's free memory before anything is allocated.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <thread>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench/gemm_tune.h"
#include "bench/op_profile.h"
#include "bench/telemetry.h"
#include "comm/mpi_comm.h"
#include "comm/nccl_comm.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/provenance.h"
#include "core/log.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_shard.h"
#include "parallel/zero.h"
#include "train/data.h"
#include "train/data_parallel_cuda.h"
#include "train/embedding_rows_cuda.h"
#include "train/pipeline_cuda.h"
#include "train/tensor_parallel_cuda.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace tb::train {
namespace {

using Recompute = model::CudaDecoder::Recompute;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// cuDNN's attention backward workspace, per model chunk: bytes per element of the [tokens, heads x head_dim] output,
// from the plans on an H200 (cuDNN 9.19): BF16 8.0 (257 MiB at 8B, s 8192), FP8 12.2 (389 MiB at 8B, 778 at 70B),
// rounded up.
double attention_workspace_allowance(const model::ModelConfig& local, int micro_batch, int seq, bool fp8_attention) {
  return (fp8_attention ? 13.0 : 9.0) * micro_batch * seq * double(local.q_dim()) + 16.0 * 1024 * 1024;
}

Recompute parse_recompute(const std::string& s) {
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  return Recompute::none;
}

std::uint64_t slot_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = ops::splitmix64(seed);
  for (char ch : name) h = ops::splitmix64(h ^ std::uint64_t(static_cast<unsigned char>(ch)));
  return h;
}

// A pinned host array (the source or destination of the graph's memcpy nodes: its address must not change).
template <class T>
class Pinned {
 public:
  explicit Pinned(std::size_t n) : n_(n) { TB_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(T))); }
  ~Pinned() { cudaFreeHost(p_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  T* get() const { return p_; }
  T& operator[](std::size_t i) const { return p_[i]; }
  std::size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

}  // namespace

// The layers of pipeline rank r's model chunk c: global stage c·pp + r of pp·vp (the whole model at pp 1).
static model::LayerRange stage_layers(const model::ModelConfig& m, int pp, int vp, int r, int c) {
  return pp > 1 ? model::pipeline_stage_layers(m.layers, pp * vp, c * pp + r) : model::LayerRange{};
}

static model::Fp8Options fp8_options(const TrainSpec& spec) {
  model::Fp8Options o;
  o.enabled = spec.precision == "fp8";
  o.delayed = spec.fp8_recipe == "delayed";
  o.history = spec.fp8_history;
  o.most_recent = spec.fp8_amax == "most_recent";
  o.margin = spec.fp8_margin;
  o.lm_head = spec.fp8_lm_head;
  o.attention = spec.fp8_attention;
  const std::string& emulate = spec.fp8_attention_emulate;  // "", qkv, o or qkv,o (validate())
  o.attention_emulate = (emulate == "qkv" || emulate == "qkv,o" ? model::kEmulateQkv : 0u) |
                        (emulate == "o" || emulate == "qkv,o" ? model::kEmulateO : 0u);
  o.grad = spec.fp8_format == "e4m3" ? DType::e4m3 : DType::e5m2;
  o.grad_stochastic = spec.fp8_grad_rounding == "stochastic";
  o.head_grad = fp8_head_grad_format(spec) == "e4m3" ? DType::e4m3 : DType::e5m2;
  o.head_stochastic = fp8_head_rounding(spec) == "stochastic";
  o.head_gemms = 0;
  for (const std::string& g : fp8_head_gemms(spec))
    o.head_gemms |= g == "forward" ? ops::kHeadForward : g == "dgrad" ? ops::kHeadDgrad : ops::kHeadWgrad;
  return o;
}

// TrainSpec::grad_buffer: shared where the step allows it: one micro-batch per step and rank (the gradients are
// written, not accumulated), one model chunk with one activation set (no pipeline), each rank the whole sequence (no
// context parallel). Data and tensor parallel read the gradients (reduce-scatters, all-reduces) before the next
// forward, as the optimizer does.
static DType grad_type(const TrainSpec& spec) { return spec.grads == "bf16" ? DType::bf16 : DType::f32; }

static bool shares_grads(const TrainSpec& spec, int pp, int cp, int micro_batches) {
  return spec.grad_buffer == "shared" && pp == 1 && cp == 1 && micro_batches == 1;
}

// Pipeline parallel: the largest of the ranks' needs. A rank holds its chunks' parameters (vp chunks when
// interleaved) and, per chunk, a decoder with the activation sets of that chunk's passes in flight (1F1B:
// min(pp - r, micro-batches)), its own scratch and attention workspace; plus the boundary buffers its schedule keeps.
MemoryEstimate estimate_memory(const TrainSpec& spec, const model::ModelConfig& full) {
  const int tp = std::max(1, spec.tp), pp = std::max(1, spec.pp), vp = pp > 1 ? std::max(1, spec.vp) : 1;
  const model::ModelConfig m = tp > 1 ? parallel::tp_shard_config(full, tp) : full;  // this rank's shard
  const int cp = std::max(1, spec.cp), seq = full.seq / cp;  // context parallel: this rank's tokens per sequence
  const int dp_ranks = std::max(1, spec.dp);
  const double dp = dp_ranks * cp;  // ZeRO-1 over dp x cp: master weights, moments and reduced gradients sharded
  const int micro_batches = std::max(1, micro_batches_per_rank(spec, dp_ranks));
  const model::Fp8Options fp8 = fp8_options(spec);
  MemoryEstimate worst;
  for (int r = 0; r < pp; ++r) {
    PipelinePlan plan;
    plan.activation_sets = {1};
    if (pp > 1) plan = plan_pipeline({pp, vp, micro_batches}, r);
    MemoryEstimate e;
    double P = 0;
    int stage_layer_count = 0;
    for (int c = 0; c < vp; ++c) {
      const model::LayerRange stage = stage_layers(m, pp, vp, r, c);
      P += double(model::dense_layout(m, stage).total);
      stage_layer_count += (stage.last < 0 ? m.layers : stage.last) - stage.first;
      e.activations += double(model::CudaDecoder::activation_bytes(m, spec.micro_batch, seq,
                                                                   parse_recompute(spec.recompute), fp8, tp, stage,
                                                                   plan.activation_sets[std::size_t(c)]));
    }
    e.weights = 2 * P;
    e.grads = double(dtype_size(grad_type(spec))) * P + (dp > 1 ? 4 * P / dp : 0.0);
    e.master = (spec.master == "split" ? 2 : 4) * P / dp;
    e.moments = (spec.moments == "bf16" ? 4 : 8) * P / dp;
    e.activations += double(plan.buffers) * spec.micro_batch * m.seq * m.d_model * 2.0;
    if (shares_grads(spec, pp, cp, micro_batches))  // the layer blocks mostly inside the gradients
      e.activations = double(model::CudaDecoder::shared_arena_bytes(
          m, spec.micro_batch, seq, parse_recompute(spec.recompute), fp8, tp, grad_type(spec)));
    if (fp8.enabled)
      e.fp8_weights = double(model::CudaDecoder::fp8_weight_bytes(m)) * stage_layer_count / m.layers +
                      (fp8.lm_head && r == pp - 1 ? double(model::CudaDecoder::fp8_lm_head_bytes(m)) : 0.0);
    e.workspaces = double(ops::DeviceContext::kWorkspaceBytes) +
                   vp * attention_workspace_allowance(m, spec.micro_batch, seq, fp8.attention);
    const std::int64_t n = std::int64_t(spec.micro_batch) * seq;  // tokens of a micro-batch on this rank
    if (!m.tied_embeddings && r == 0 && dp > 1)  // the embedding gradient's rows from the other replicas
      e.workspaces += double(EmbeddingRowsGather::bytes(m, n, int(dp)));
    if (!m.tied_embeddings && tp > 1 && r == 0) e.workspaces += double(EmbeddingRowsGather::bytes(m, n / tp, tp));
    if (e.total() > worst.total()) worst = e;
  }
  return worst;
}

std::string fit_advice(const TrainSpec& spec, const model::ModelConfig& m, double free_bytes) {
  const MemoryEstimate e = estimate_memory(spec, m);
  if (e.total() <= free_bytes) return "";
  std::string msg = fmt::format("{} with {} layers, seq {}, micro-batch {}{}, --recompute {} needs about {:.1f} GiB on "
                                "the GPU ({}); {:.1f} GiB are free.",
                                m.name, m.layers, m.seq, spec.micro_batch,
                                spec.pp > 1 ? fmt::format(", pp {} vp {} (the fullest rank)", spec.pp, spec.vp) : "",
                                spec.recompute, e.total() / kGiB, e.parts_gib(), free_bytes / kGiB);
  std::vector<std::string> knobs;
  auto try_knob = [&](TrainSpec alt, const model::ModelConfig& am, const std::string& what) {
    const double t = estimate_memory(alt, am).total();
    if (t <= free_bytes) knobs.push_back(fmt::format("{} ({:.1f} GiB)", what, t / kGiB));
  };
  for (const char* rc : {"selective", "full"})
    if (spec.recompute != rc) {
      TrainSpec alt = spec;
      alt.recompute = rc;
      try_knob(alt, m, fmt::format("--recompute {}", rc));
    }
  if (spec.micro_batch > 1) {
    TrainSpec alt = spec;
    alt.micro_batch = 1;
    try_knob(alt, m, "--micro-batch 1 (with --global-batch for accumulation)");
  }
  if (spec.moments != "bf16") {
    TrainSpec alt = spec;
    alt.moments = "bf16";
    try_knob(alt, m, "--moments bf16");
  }
  for (int layers = m.layers - 1; layers >= std::max(1, spec.pp * spec.vp); --layers) {
    model::ModelConfig am = m;
    am.layers = layers;
    if (estimate_memory(spec, am).total() <= free_bytes) {
      knobs.push_back(fmt::format("--layers {} or fewer (a proxy of the model)", layers));
      break;
    }
  }
  msg += knobs.empty() ? " Nothing on one GPU makes it fit: it needs a parallel layout over several GPUs."
                       : " Any of these would fit: " + fmt::format("{}", fmt::join(knobs, "; ")) + ".";
  return msg;
}

TrainResult train_cuda(const TrainSpec& spec_in, const std::function<void(const StepStats&)>& on_step) {
  TrainSpec spec = spec_in;
  const comm::World world = spec.job_ranks ? comm::world() : comm::World{};  // else this process alone
  TB_REQUIRE(spec.tp >= 1 && spec.pp >= 1 && spec.cp >= 1 && world.size % (spec.tp * spec.pp * spec.cp) == 0,
             fmt::format("--tp {} x --pp {} x --cp {} does not divide the job's {} ranks", spec.tp, spec.pp, spec.cp,
                         world.size));
  const parallel::MeshShape mesh = mesh_shape(spec, world.size);
  spec.dp = mesh.dp;
  // A mix with tensor or pipeline parallel: one NCCL communicator per group (parallel::Mesh), none over the world
  // (data and context parallel alone, or together, use the world's).
  const bool mix = is_group_mix(mesh);
  const parallel::Coord place = parallel::coord_of(mesh, world.rank);  // this rank's coordinates in the mesh
  int devices = 0;
  TB_CHECK(cudaGetDeviceCount(&devices));
  if (spec.share_gpus && world.size > devices) {
    if (const std::string problem = share_gpus_problem(mesh, devices); !problem.empty()) raise_config(problem);
    spec.gpu = parallel::shared_gpu(place, devices);
  } else if (world.size > 1) {
    spec.gpu = world.local_rank;
  }
  validate(spec);
  TrainResult res;
  res.model = resolve_model(spec);
  res.gpus = world.size;
  res.gpu = spec.gpu;
  const model::ModelConfig& m = res.model;
  const int tp = spec.tp;
  const int global = global_batch(spec, spec.dp);
  const int pp = spec.pp, vp = spec.vp, cp = spec.cp;
  parallel::validate_layout(mesh, m, world.size,
                            spec.micro_batch, global);
  const model::ModelConfig ml = tp > 1 ? parallel::tp_shard_config(m, tp) : m;  // this rank's shard of the model
  const int dp = spec.dp, accum = micro_batches_per_rank(spec, dp);
  const int dp_rank = place.dp, cp_rank = place.cp, pp_rank = place.pp;
  const int zero_ranks = dp * cp, zero_rank = dp_rank * cp + cp_rank;  // the distributed optimizer's group: dp x cp
  const int mb = spec.micro_batch, seq = m.seq / cp;  // context parallel: this rank's two chunks of every sequence
  const std::size_t n = std::size_t(mb) * std::size_t(seq);
  res.params = model::param_count(m);
  res.tokens_per_step = double(global) * m.seq;
  res.flops_per_step = res.tokens_per_step * model::flops_per_token(m, spec.convention).total();
  const double flops_per_gpu = res.flops_per_step / world.size;
  res.estimate = estimate_memory(spec, m);

  // ---- Fit check before any allocation.
  TB_REQUIRE(spec.gpu < devices, fmt::format("rank {} of {} needs GPU {} of this node, which has {} GPU{}: run at most "
                                             "{} ranks per node",
                                             world.rank, world.size, spec.gpu, devices, devices == 1 ? "" : "s", devices));
  TB_CHECK(cudaSetDevice(spec.gpu));
  std::size_t free_b = 0, total_b = 0;
  TB_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (std::string advice = fit_advice(spec, m, double(free_b)); !advice.empty()) raise_config(advice);
  cudaDeviceProp prop{};
  TB_CHECK(cudaGetDeviceProperties(&prop, spec.gpu));
  res.device_name = prop.name;

  ops::reset_device_memory_peak();
  ops::DeviceContext dc(spec.gpu);
  cudaStream_t st = dc.stream();
  const model::Fp8Options fp8 = fp8_options(spec);
  // ---- Data parallel: the ZeRO-1 partition, NCCL over the job's ranks.
  // Each model chunk's layout and ZeRO-1 partition (vp 1: the one chunk, `net`).
  std::vector<parallel::ZeroLayout> zls;
  for (int c = 0; c < vp; ++c)
    zls.push_back(parallel::zero_layout(model::dense_layout(ml, stage_layers(m, pp, vp, pp_rank, c)), zero_ranks,
                                        zero_rank));
  const parallel::ZeroLayout& zl = zls[0];
  std::unique_ptr<comm::Communicator> host_world;
  std::unique_ptr<parallel::Mesh> host_mesh;
  // the world's, or (a mix) the groups': tp, pp, cp and dp x cp (ZeRO-1)
  std::unique_ptr<comm::NcclCommunicator> nccl, tp_nccl, pp_nccl, cp_nccl, dp_nccl;
  if (world.size > 1) {
    host_world = comm::world_communicator();
    if (mix) {
      host_mesh = std::make_unique<parallel::Mesh>(*host_world, mesh);
      if (tp > 1) tp_nccl = comm::NcclCommunicator::create(host_mesh->tp(), spec.gpu, st);
      if (pp > 1) pp_nccl = comm::NcclCommunicator::create(host_mesh->pp(), spec.gpu, st);
      if (cp > 1) cp_nccl = comm::NcclCommunicator::create(host_mesh->cp(), spec.gpu, st);
      if (zero_ranks > 1) dp_nccl = comm::NcclCommunicator::create(host_mesh->dp_cp(), spec.gpu, st);
    } else {
      nccl = comm::NcclCommunicator::create(*host_world, spec.gpu, st);
    }
  }
  // Each group's communicator (used only where the group has several ranks): its own, or the world's.
  comm::NcclCommunicator* tp_comm = tp_nccl ? tp_nccl.get() : nccl.get();
  comm::NcclCommunicator* pp_comm = pp_nccl ? pp_nccl.get() : nccl.get();
  comm::NcclCommunicator* dp_comm = dp_nccl ? dp_nccl.get() : nccl.get();
  comm::NcclCommunicator* waiter = nccl ? nccl.get() : tp_nccl ? tp_nccl.get() : pp_nccl.get();  // step completion
  // Tied embeddings over pipeline stages: the first stage's embedding and the last stage's copy (its LM head) each
  // get the sum of both gradients, over pipeline ranks 0 and pp - 1 (ncclCommSplit: every pp rank takes part).
  std::unique_ptr<comm::NcclCommunicator> tied_comm;
  if (pp > 1 && m.tied_embeddings) {
    tied_comm = pp_comm->split_nccl(pp_rank == 0 || pp_rank == pp - 1 ? 0 : -1, pp_rank);
    if (tied_comm) tied_comm->set_stream(st);
  }
  // This rank's model chunks: the whole model, its pipeline stage, or (interleaved, --vp) vp chunks, chunk c = global
  // stage c·pp + r, each a decoder of its layers' slots (named as the whole model's: the same initial values). Data,
  // tensor and context parallel (vp 1) use the one, `net`.
  std::vector<std::unique_ptr<model::CudaDecoder>> chunks;
  for (int c = 0; c < vp; ++c)
    chunks.push_back(std::make_unique<model::CudaDecoder>(dc, ml, parse_recompute(spec.recompute), spec.deterministic,
                                                          fp8, zls[std::size_t(c)].padded_total,
                                                          stage_layers(m, pp, vp, pp_rank, c)));
  model::CudaDecoder& net = *chunks[0];
  for (const auto& chunk : chunks) chunk->set_grad_type(grad_type(spec));
  res.grads_shared = shares_grads(spec, pp, cp, accum);
  if (res.grads_shared) net.share_grads_with_activations();  // frees the separate gradient buffer (prepare() below)
  // Tensor and data parallel per model chunk (its parameters and gradients); tpc and ddp: chunk 0's.
  std::vector<std::unique_ptr<TensorParallelCuda>> tpcs;  // over the world (alone) or the tp group (a mix)
  for (std::size_t c = 0; c < chunks.size() && tp > 1; ++c) {
    tpcs.push_back(std::make_unique<TensorParallelCuda>(*tp_comm, st, ml, chunks[c]->dense_layout(),
                                                        chunks[c]->grads_device(), std::int64_t(n) / tp));
    chunks[c]->set_tensor_parallel(tpcs[c]->ops());
  }
  TensorParallelCuda* tpc = tpcs.empty() ? nullptr : tpcs[0].get();
  std::unique_ptr<comm::NcclCommunicator> cp_comm;  // K, V all-gathers and dK, dV reduce-scatters, compute stream
  if (cp > 1) {
    cp_comm = cp_nccl ? std::move(cp_nccl) : nccl->split_nccl(dp_rank, cp_rank);
    model::ContextParallelOps ops;
    ops.size = cp, ops.rank = cp_rank;
    ops.all_gather = [&](const model::CudaDecoder::bf16* local, model::CudaDecoder::bf16* all, std::size_t elems) {
      cp_comm->all_gather(local, all, elems, DType::bf16);
    };
    ops.reduce_scatter = [&](const model::CudaDecoder::bf16* all, model::CudaDecoder::bf16* local, std::size_t elems) {
      cp_comm->reduce_scatter(all, local, elems, DType::bf16);
    };
    for (const auto& chunk : chunks) chunk->set_context_parallel(ops);
  }
  // A DataParallelCuda runs its communicator on its own stream: the later chunks' get communicators of their own.
  std::vector<std::unique_ptr<comm::NcclCommunicator>> chunk_dp_comms;
  std::vector<std::unique_ptr<DataParallelCuda>> ddps;  // over dp x cp (the cp ranks' gradients are partial sums too)
  for (std::size_t c = 0; c < chunks.size() && zero_ranks > 1; ++c) {
    // the embedding gradient exchanged as rows (bucket 0 of global stage 0)
    const bool rows = !m.tied_embeddings && pp_rank == 0 && c == 0;
    comm::NcclCommunicator* chunk_comm = dp_comm;
    if (c > 0) chunk_comm = chunk_dp_comms.emplace_back(dp_comm->split_nccl(0, dp_comm->rank())).get();
    ddps.push_back(std::make_unique<DataParallelCuda>(*chunk_comm, zls[c], st, chunks[c]->params_device(),
                                                      chunks[c]->grads_device(), ml, rows ? std::int64_t(n) : 0,
                                                      vp == 1 ? 2 : 0));
    res.buckets += int(zls[c].buckets.size());
    if (!tpcs.empty()) ddps[c]->before_reduce = [t = tpcs[c].get()](cudaStream_t s) { t->order_after_grads(s); };
  }
  DataParallelCuda* ddp = ddps.empty() ? nullptr : ddps[0].get();
  // FP8 delayed scaling: the amaxes' max over the ranks holding the same layers: the world's (dp, tp, cp, dp x cp
  // alone), or in a mix the tp group's, then dp x cp's (pipeline alone: none).
  if (fp8.enabled && fp8.delayed && spec.fp8_reduce_amax && world.size > pp) {
    comm::NcclCommunicator* all = nccl.get();
    for (const auto& chunk : chunks)
      chunk->fp8_reduce_amax = [all, tpc, ddp](float* buffer, std::size_t floats) {
        if (all) return all->all_reduce(buffer, buffer, floats, DType::f32, comm::ReduceOp::max);
        if (tpc) tpc->all_reduce(buffer, floats, DType::f32, comm::ReduceOp::max);
        if (ddp) ddp->all_reduce(buffer, floats, DType::f32, comm::ReduceOp::max);
      };
  }
  const bool bf16_moments = spec.moments == "bf16";
  const std::size_t moment_bytes = bf16_moments ? 2 : 4;

  // ---- Master weights (fp32, initialised on the device slot by slot), moments, the bf16 model copy. Split master:
  // the model weights are the master's high half and `master` holds the 16-bit residuals.
  const bool split = spec.master == "split";
  // The parameter slots of this rank, chunk after chunk, each with its decoder (vp 1: net's layout.slots).
  struct ChunkSlot {
    std::size_t chunk;
    model::CudaDecoder* net;
    const model::Slot* slot;
  };
  std::vector<ChunkSlot> slots;
  for (std::size_t c = 0; c < chunks.size(); ++c)
    for (const model::Slot& sl : chunks[c]->dense_layout().slots) slots.push_back({c, chunks[c].get(), &sl});
  // The last stage's copy of a tied embedding: in no gradient norm (the first stage's counts it).
  auto is_tied_copy = [](const ChunkSlot& cs) { return cs.slot->name == "embed.weight" && !cs.net->first_stage(); };
  float* tied_grads = nullptr;  // with tied_comm: this rank's embedding, or its copy, in chunk tied_chunk
  std::size_t tied_elems = 0, tied_chunk = chunks.size();
  for (const ChunkSlot& cs : slots)
    if (tied_comm && cs.slot->name == "embed.weight")
      tied_grads = cs.net->grads_device() + cs.slot->offset, tied_elems = cs.slot->size, tied_chunk = cs.chunk;
  TB_REQUIRE(!tied_comm || tied_grads, "train: a first or last pipeline stage of a tied model without its embedding");
  // The optimizer's tensors: every slot (one rank), or this rank's ZeRO-1 segments (flat offset in the model
  // weights, shard offset in the master, moments and reduced gradients, which hold the chunks' slots back to back).
  // (several chunks: their segments back to back, each segment's slot an index into `slots`)
  std::vector<parallel::ZeroSegment> segments;
  std::vector<std::size_t> shard_base;  // per chunk: where its shard starts in the optimizer's tensors
  std::size_t S = 0;  // optimizer state elements on this rank
  if (zero_ranks > 1) {
    std::size_t slot_base = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      shard_base.push_back(S);
      for (parallel::ZeroSegment g : zls[c].segments) {
        g.slot += int(slot_base);
        g.shard += S;
        segments.push_back(g);
      }
      S += zls[c].shard_size;
      slot_base += chunks[c]->dense_layout().slots.size();
    }
  } else {
    for (std::size_t i = 0; i < slots.size(); ++i) {
      segments.push_back({slots[i].slot->offset, S, slots[i].slot->size, int(i)});
      S += slots[i].slot->size;  // slots are packed (model/param_layout.h): at vp 1, shard == flat offset
    }
  }
  // Tensor parallel: the replicated embedding and LM head are updated a 1/tp part per rank (their gradients are
  // equal on every rank), then all-gathered while the other parameters update: tp times less optimizer work on them.
  std::vector<std::pair<std::size_t, std::size_t>> split_slots;  // (offset, size) of those slots
  auto split_update = [&](const model::Slot& sl) {  // (with data parallel the ZeRO-1 shards already split them)
    return tpc && !ddp && vp == 1 && (sl.name == "embed.weight" || sl.name == "lm_head.weight") &&
           sl.size % std::size_t(tp) == 0;
  };
  if (tpc)
    for (parallel::ZeroSegment& g : segments)
      if (const model::Slot& sl = *slots[std::size_t(g.slot)].slot; split_update(sl)) {
        split_slots.emplace_back(sl.offset, sl.size);
        g.count = sl.size / std::size_t(tp);
        g.flat += std::size_t(tpc->rank()) * g.count;
        g.shard += std::size_t(tpc->rank()) * g.count;
      }
  if (tpc) tpc->set_split_slots(split_slots);
  ops::DeviceBuffer master(dc.device(), S * (split ? sizeof(std::int16_t) : sizeof(float)));
  ops::DeviceBuffer moments(dc.device(), 2 * S * moment_bytes);
  TB_CHECK(cudaMemsetAsync(moments.get(), 0, moments.bytes(), st));
  {  // every rank draws every slot of the full model (the same values), keeps its tensor-parallel shard of the model
     // weights (parallel/tensor_shard.h) and its own master segments. A slot is drawn in pieces of at most
     // kInitPiece elements (the counter-based draw continues where the last piece ended), but a tensor-parallel
     // shard of a split slot, which is cut out of the whole slot drawn at once.
    constexpr std::size_t kInitPiece = std::size_t(1) << 26;  // 256 MiB of fp32 values + 128 MiB of residuals
    const model::DenseLayout full = model::dense_layout(m);
    auto split_by_tp = [&](const model::Slot& s) { return tp > 1 && !parallel::tp_replicated(s.name); };
    std::size_t piece = 0, largest_full = 0;
    for (const ChunkSlot& cs : slots) {
      piece = std::max(piece, split_by_tp(*cs.slot) ? cs.slot->size : std::min(cs.slot->size, kInitPiece));
      if (split_by_tp(*cs.slot)) largest_full = std::max(largest_full, full.at(cs.slot->name).size);
    }
    ops::DeviceBuffer init(dc.device(), piece * sizeof(float)), lo(dc.device(), piece * sizeof(std::int16_t));
    ops::DeviceBuffer whole(dc.device(), largest_full * sizeof(float));
    std::size_t seg = 0;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const model::Slot& s = *slots[i].slot;
      const bool cut = split_by_tp(s);
      const std::size_t step = cut ? s.size : kInitPiece;
      for (std::size_t p0 = 0; p0 < s.size; p0 += step) {  // elements [p0, p1) of the slot
        const std::size_t p1 = std::min(s.size, p0 + step);
        float* v = init.as<float>();
        if (cut) {
          const model::Slot& f = full.at(s.name);
          ops::fill_normal(whole.as<float>(), f.size, slot_seed(spec.seed, f.name), float(f.init_value),
                           float(f.init_std), st);
          const std::size_t cols = std::size_t(f.shape[1]);
          std::size_t at = 0;
          for (const parallel::SlotPart& p : parallel::tp_slot_parts(m, f, tp, tpc->rank())) {
            TB_CHECK(cudaMemcpy2DAsync(v + at, std::size_t(p.cols) * sizeof(float),
                                       whole.as<float>() + std::size_t(p.row0) * cols + std::size_t(p.col0),
                                       cols * sizeof(float), std::size_t(p.cols) * sizeof(float),
                                       std::size_t(p.rows), cudaMemcpyDeviceToDevice, st));
            at += std::size_t(p.rows * p.cols);
          }
        } else {
          ops::fill_normal(v, p1 - p0, slot_seed(spec.seed, s.name), float(s.init_value), float(s.init_std), st,
                           p0);
        }
        auto* weights = slots[i].net->params_device() + s.offset + p0;
        if (split)
          ops::master_split(v, weights, lo.as<std::int16_t>(), p1 - p0, st);
        else
          ops::cast_f32_to_bf16(weights, v, p1 - p0, st);
        // this rank's master segments of the slot, where they meet [p0, p1)
        for (std::size_t k = seg; k < segments.size() && segments[k].slot == int(i); ++k) {
          const parallel::ZeroSegment& g = segments[k];
          const std::size_t a = std::max(g.flat - s.offset, p0), b = std::min(g.flat - s.offset + g.count, p1);
          if (a >= b) continue;
          const std::size_t to = g.shard + (a - (g.flat - s.offset));
          if (split)
            TB_CHECK(cudaMemcpyAsync(master.as<std::int16_t>() + to, lo.as<std::int16_t>() + (a - p0),
                                     (b - a) * sizeof(std::int16_t), cudaMemcpyDeviceToDevice, st));
          else
            TB_CHECK(cudaMemcpyAsync(master.as<float>() + to, v + (a - p0), (b - a) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, st));
        }
      }  // init and lo are reused by the next piece in stream order
      while (seg < segments.size() && segments[seg].slot == int(i)) ++seg;
    }
    dc.synchronize();  // before the temporaries are freed
  }

  // Gradients in the activations' memory: the arena that holds them is allocated before anything takes
  // grads_device() (the optimizer's tensors below), after the master weights' init (whose temporaries would otherwise
  // come on top of the whole arena).
  if (res.grads_shared) {
    net.prepare(mb, seq);
    if (tpc) tpc->set_grads(net.grads_device());
    if (ddp) ddp->set_grads(net.grads_device());
  }
  std::vector<ops::AdamWTensor> tensors;
  auto* m_base = static_cast<std::byte*>(moments.get());
  std::size_t early_tensors = 0;  // data parallel: the tensors of the buckets all-gathered at the end of the step
  for (const parallel::ZeroSegment& g : segments) {
    ops::AdamWTensor t;
    if (split)
      t.master_lo = master.as<std::int16_t>() + g.shard;
    else
      t.master = master.as<float>() + g.shard;
    const ChunkSlot& cs = slots[std::size_t(g.slot)];
    if (ddp) {  // the chunk's data parallel, with the segment's shard offset in its own partition
      parallel::ZeroSegment local = g;
      local.shard -= shard_base[cs.chunk];
      t.grad = ddps[cs.chunk]->segment_grads(local);
    } else {
      t.grad = cs.net->grad_at(g.flat);
    }
    if (ddp && ddp->early() > 0 && g.flat < zl.buckets[std::size_t(ddp->early() - 1)].end) ++early_tensors;
    t.exp_avg = m_base + g.shard * moment_bytes;
    t.exp_avg_sq = m_base + (S + g.shard) * moment_bytes;
    t.model = cs.net->params_device() + g.flat;
    t.numel = std::int64_t(g.count);
    t.decay = decays(*cs.slot);
    tensors.push_back(t);
  }
  // FP8 with delayed scaling: AdamW writes the linear layers' FP8 copies in its update (TrainSpec::fp8_weight_cast),
  // and fp8_begin_step() stops casting them. Each rank's whole weights (one GPU, tensor and pipeline parallel: their
  // amaxes still reach the ranks' max at fp8_end_step), not ZeRO-1's shards (data and context parallel: the copies need
  // whole weights). auto: only with fp32 moments (8B L8 on an H200: -0.83 ms; with bf16 moments +0.16 ms,
  // bench/RESULTS.md).
  if (net.fp8()) res.fp8_weight_cast = "separate";
  const bool fuse = spec.fp8_weight_cast == "fused" || (spec.fp8_weight_cast == "auto" && !bf16_moments);
  for (std::size_t c = 0; c < chunks.size() && fuse && zero_ranks == 1; ++c) {
    const auto copies = chunks[c]->fp8_weight_copies();
    std::size_t found = 0;
    for (std::size_t i = 0; i < segments.size(); ++i)
      for (const model::CudaDecoder::Fp8WeightCopy& copy : copies)
        if (slots[std::size_t(segments[i].slot)].chunk == c && copy.flat == segments[i].flat &&
            copy.count == segments[i].count)
          tensors[i].fp8_copy = copy.cast, ++found;
    TB_REQUIRE(found == copies.size(),
               fmt::format("internal: {} of the {} FP8 weight copies of model chunk {} match an optimizer tensor; "
                           "rerun with --fp8-weight-cast separate",
                           found, copies.size(), c));
    if (found > 0) chunks[c]->fp8_weights_from_optimizer(), res.fp8_weight_cast = "adamw";
  }
  const DType moment_type = bf16_moments ? DType::bf16 : DType::f32;
  const DType grads_type = grad_type(spec);  // (several ranks: fp32, validate())
  const ops::AdamWGroup group(dc.device(), tensors, moment_type, grads_type);
  // Data parallel: the optimizer in two launches, the early buckets first (their all-gather overlaps the second).
  std::unique_ptr<ops::AdamWGroup> early_group, late_group;
  // The gradient norm counts every parameter once: a tensor-parallel replicated one on tp rank 0 (the split embedding
  // and LM head: each rank's part), the shards on every rank, a tied embedding on the first stage only; the ranks'
  // sums of squares are then added up. Tensor parallel: the split parts update first (early), so their all-gather
  // overlaps the rest.
  std::vector<ops::AdamWTensor> counted, first, rest;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const ChunkSlot& cs = slots[std::size_t(segments[i].slot)];
    const model::Slot& sl = *cs.slot;
    if (!is_tied_copy(cs) && (!tpc || !parallel::tp_replicated(sl.name) || split_update(sl) || tpc->rank() == 0))
      counted.push_back(tensors[i]);
    (split_update(sl) ? first : rest).push_back(tensors[i]);
  }
  std::unique_ptr<ops::AdamWGroup> counted_group;  // (every tensor counts: `group`)
  if (counted.size() < tensors.size())
    counted_group = std::make_unique<ops::AdamWGroup>(dc.device(), counted, moment_type, grads_type);
  if (tpc && !first.empty() && !rest.empty()) {
    early_group = std::make_unique<ops::AdamWGroup>(dc.device(), first, moment_type);
    late_group = std::make_unique<ops::AdamWGroup>(dc.device(), rest, moment_type);
  }
  const ops::AdamWGroup& norm_group = counted_group ? *counted_group : group;
  if (ddp && early_tensors > 0 && early_tensors < tensors.size()) {
    const std::span<const ops::AdamWTensor> all(tensors);
    early_group = std::make_unique<ops::AdamWGroup>(dc.device(), all.first(early_tensors), moment_type);
    late_group = std::make_unique<ops::AdamWGroup>(dc.device(), all.subspan(early_tensors), moment_type);
  }
  ops::AdamWConfig hp;
  hp.beta1 = spec.beta1, hp.beta2 = spec.beta2, hp.eps = spec.eps, hp.weight_decay = spec.weight_decay;
  const float max_norm = spec.clip > 0 ? float(spec.clip) : std::numeric_limits<float>::infinity();

  // ---- Pipeline parallel: this rank's schedule (1F1B, or interleaved over the chunks), its activation sets and
  // boundary buffers.
  std::unique_ptr<PipelineCuda> pipe;
  if (pp > 1) pipe = std::make_unique<PipelineCuda>(*pp_comm, st, chunks, parallel::PipelineShape{pp, vp, accum});

  // ---- Step inputs and outputs: pinned host memory <-> device.
  for (std::size_t c = 0; c < chunks.size(); ++c) chunks[c]->prepare(mb, seq, pipe ? pipe->activation_sets(int(c)) : 1);
  if (pipe) pipe->prepare();
  Pinned<std::int32_t> h_tokens(std::size_t(accum) * n), h_targets(std::size_t(accum) * n);
  Pinned<ops::AdamWStepScalars> h_scalars(1);
  Pinned<float> h_losses{std::size_t(accum)};
  Pinned<ops::GradNormResult> h_norm(1);
  ops::DeviceBuffer d_tokens(dc.device(), h_tokens.bytes()), d_targets(dc.device(), h_targets.bytes());
  ops::DeviceBuffer d_scalars(dc.device(), sizeof(ops::AdamWStepScalars));
  ops::DeviceBuffer d_losses(dc.device(), h_losses.bytes()), d_norm(dc.device(), sizeof(ops::GradNormResult));

  bench::OpProfiler profiler(st);
  bool profiling = false;
  auto mark = [&](std::string_view op) {
    if (profiling) profiler.mark(op);
  };
  for (const auto& chunk : chunks) chunk->on_op = mark;
  // The chunks whose last backward of the step is running (one chunk: the last micro-batch's; a pipeline's: set by
  // its schedule). A chunk holding a tied embedding (or its copy) reduces at the step's end: its dp reduce-scatter
  // must follow the two stages' all-reduce, which the first stage can only join after its whole schedule.
  std::vector<char> final_pass(chunks.size(), 0);
  if (pipe)
    pipe->before_backward = [&](int chunk, bool last) {
      final_pass[std::size_t(chunk)] = last && std::size_t(chunk) != tied_chunk;
    };
  // The embedding's rows (chunk 0 of the first stage): over the tp group (the micro-batch's rows), then every dp
  // replica's. Each chunk's gradients: the tp all-reduces first (before_reduce orders the dp reduce-scatters after
  // them); on the last micro-batch only (a pipeline chunk's: during its last backward, overlapping the rest of the
  // schedule; the rest at finish_grads).
  if (tpc && !m.tied_embeddings)
    net.gather_embedding_rows = [&](const model::CudaDecoder::bf16* dnext, const std::int32_t* tokens,
                                    std::int64_t rows) { return tpc->embedding_rows(dnext, tokens, rows); };
  if (ddp && ddp->sparse_embedding())
    net.gather_embedding_rows = [&](const model::CudaDecoder::bf16* dnext, const std::int32_t* tokens,
                                    std::int64_t rows) {
      if (!tpc) return ddp->embedding_rows(dnext, tokens, rows);
      const model::CudaDecoder::EmbeddingRows tp_rows = tpc->embedding_rows(dnext, tokens, rows);
      return ddp->embedding_rows(tp_rows.dnext, tp_rows.tokens, tp_rows.rows);
    };
  for (std::size_t c = 0; c < chunks.size() && (tpc || ddp); ++c) {
    TensorParallelCuda* t = tpc ? tpcs[c].get() : nullptr;
    DataParallelCuda* d = ddp ? ddps[c].get() : nullptr;
    if (d) chunks[c]->on_params_needed = [d](std::size_t end) { d->params_needed(end); };
    chunks[c]->on_grads_ready = [t, d, &final_pass, c](std::size_t from) {
      if (!final_pass[c]) return;
      if (t) t->grads_ready(from);
      if (d) d->grads_ready(from);
    };
  }
  auto enqueue_step = [&] {
    TB_CHECK(cudaMemcpyAsync(d_tokens.get(), h_tokens.get(), h_tokens.bytes(), cudaMemcpyHostToDevice, st));
    TB_CHECK(cudaMemcpyAsync(d_targets.get(), h_targets.get(), h_targets.bytes(), cudaMemcpyHostToDevice, st));
    TB_CHECK(cudaMemcpyAsync(d_scalars.get(), h_scalars.get(), h_scalars.bytes(), cudaMemcpyHostToDevice, st));
    for (const auto& d : ddps) d->start_step();  // all-gather the weights the ranks' optimizers wrote (overlapped
    for (const auto& t : tpcs) t->start_step();  // with the forward)
    for (const auto& chunk : chunks) chunk->zero_grads_for_overwrite();
    mark("inputs + zero grads");
    for (std::size_t c = 0; c < ddps.size() && net.fp8(); ++c)
      ddps[c]->params_needed(zls[c].padded_total);  // the FP8 casts read every weight
    for (const auto& chunk : chunks) chunk->fp8_begin_step();  // FP8 copies of the weights AdamW just wrote
    if (pipe) {  // the schedule's forwards, backwards and sends / receives; losses only on the last stage
      TB_CHECK(cudaMemsetAsync(d_losses.get(), 0, h_losses.bytes(), st));
      pipe->enqueue(d_tokens.as<std::int32_t>(), d_targets.as<std::int32_t>(), n, 1.0 / (accum * dp),
                    d_losses.as<float>());
    }
    for (int a = 0; a < accum && !pipe; ++a) {
      final_pass[0] = a == accum - 1;
      net.forward_backward_device(d_tokens.as<std::int32_t>() + std::size_t(a) * n,
                                  d_targets.as<std::int32_t>() + std::size_t(a) * n, mb, seq, 1.0 / (accum * dp),
                                  d_losses.as<float>() + a);
    }
    for (const auto& chunk : chunks) chunk->fp8_end_step();
    auto* norm = d_norm.as<ops::GradNormResult>();
    for (const auto& t : tpcs) t->finish_grads();
    if (tpc) mark("tp gradient all-reduce (exposed)");
    if (tied_comm) {  // (after the tp sums, before the dp reduce-scatters read it)
      tied_comm->all_reduce(tied_grads, tied_grads, tied_elems, DType::f32);
      mark("tied embedding gradient all-reduce");
    }
    for (const auto& d : ddps) d->finish_grads();  // (dp x tp: after the tp all-reduces, whose sums it reads)
    if (ddp) mark("gradient reduce-scatter (exposed)");
    ops::grad_norm(norm_group, max_norm, norm, st);
    // Sums over the groups in turn (tp, the pipeline's stages, the dp x cp shards): the squares of the gradient norm,
    // then the norm and clip scale from the total; the losses (the last stage's reach every rank).
    auto sum_over_groups = [&](void* buf, std::size_t count, DType t) {
      if (tpc) tpc->all_reduce(buf, count, t);
      if (pipe) pp_comm->all_reduce(buf, buf, count, t);
      if (ddp) ddp->all_reduce(buf, count, t);
    };
    if (tpc || pipe || ddp) {
      sum_over_groups(&norm->norm_sq, 1, DType::f64);
      ops::clip_from_norm_sq(norm, max_norm, st);
      sum_over_groups(d_losses.get(), std::size_t(accum), DType::f32);
    }
    const auto* scalars = d_scalars.as<ops::AdamWStepScalars>();
    const ops::GradNormResult* clip = spec.clip > 0 ? norm : nullptr;
    if (early_group) {
      ops::adamw_step(*early_group, hp, scalars, clip, st);
      if (ddp) ddp->gather_early();  // the next forward starts with these buckets: gathered while the rest updates
      if (tpc) tpc->gather_parts(net.params_device(), split_slots);
      ops::adamw_step(*late_group, hp, scalars, clip, st);
    } else {
      ops::adamw_step(group, hp, scalars, clip, st);
      for (const auto& d : ddps) d->gather_early();
    }
    for (const auto& d : ddps) d->finish_step();
    for (const auto& t : tpcs) t->finish_step();
    mark("grad norm + AdamW");
    TB_CHECK(cudaMemcpyAsync(h_losses.get(), d_losses.get(), h_losses.bytes(), cudaMemcpyDeviceToHost, st));
    TB_CHECK(cudaMemcpyAsync(h_norm.get(), d_norm.get(), h_norm.bytes(), cudaMemcpyDeviceToHost, st));
  };

  DataSource source(spec.data, spec.token_type, m.vocab, m.seq, spec.seed);
  res.loss_floor = source.loss_floor();
  const LrSchedule schedule = lr_schedule(spec, m);
  auto load_inputs = [&](int step) {  // step 1-based; rank r takes micro-batches [r accum, (r + 1) accum) of the step
    const std::size_t c = std::size_t(m.seq) / std::size_t(2 * cp);  // context parallel: chunk length
    for (int k = 0; k < accum * dp; ++k) {
      const Batch b = source.next(mb);
      const int a = k - dp_rank * accum;  // tensor-, pipeline- and context-parallel ranks share their micro-batches
      if (a < 0 || a >= accum) continue;
      if (cp == 1) {
        std::copy(b.tokens.begin(), b.tokens.end(), h_tokens.get() + std::size_t(a) * n);
        std::copy(b.targets.begin(), b.targets.end(), h_targets.get() + std::size_t(a) * n);
        continue;
      }
      for (int i = 0; i < mb; ++i)  // sequence i: this rank's chunks cp_rank and 2 cp - 1 - cp_rank
        for (int h = 0; h < 2; ++h) {
          const std::size_t g = std::size_t(h == 0 ? cp_rank : 2 * cp - 1 - cp_rank);
          const std::size_t from = std::size_t(i) * std::size_t(m.seq) + g * c;
          const std::size_t to = std::size_t(a) * n + std::size_t(i) * std::size_t(seq) + std::size_t(h) * c;
          std::copy_n(b.tokens.begin() + std::ptrdiff_t(from), c, h_tokens.get() + to);
          std::copy_n(b.targets.begin() + std::ptrdiff_t(from), c, h_targets.get() + to);
        }
    }
    h_scalars[0].lr = float(schedule.lr(step - 1));
    h_scalars[0].step = step;
  };

  GraphExec graph;
  auto capture = [&]() -> std::string {
    cudaGraph_t g = nullptr;
    TB_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_step();
    } catch (const Error& e) {
      cudaStreamEndCapture(st, &g);
      if (g) cudaGraphDestroy(g);
      cudaGetLastError();
      return std::string("capture failed: ") + e.what();
    }
    const cudaError_t end = cudaStreamEndCapture(st, &g);
    if (end != cudaSuccess || !g) {
      cudaGetLastError();
      return std::string("capture failed: ") + cudaGetErrorString(end);
    }
    const cudaError_t inst = cudaGraphInstantiate(&graph.exec, g, 0);
    cudaGraphDestroy(g);
    if (inst != cudaSuccess) {
      cudaGetLastError();
      graph.exec = nullptr;
      return std::string("instantiation failed: ") + cudaGetErrorString(inst);
    }
    return "captured";
  };

  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  TB_CHECK(cudaEventCreate(&ev0));
  TB_CHECK(cudaEventCreate(&ev1));
  bench::Telemetry telemetry({dc.device()});
  bench::Telemetry::Mark tm_from = 0;
  std::vector<double> measured, measured_gpu;
  dc.synchronize();
  const bool delay = spec.debug_delay_rank >= 0 && launch_rank().rank == spec.debug_delay_rank &&
                     spec.debug_delay_ms > 0;  // an injected straggler
  for (int step = 1; step <= spec.steps; ++step) {
    load_inputs(step);
    if (step == spec.warmup_steps + 1) tm_from = telemetry.mark();
    const auto t0 = std::chrono::steady_clock::now();
    if (delay) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(spec.debug_delay_ms));
    TB_CHECK(cudaEventRecord(ev0, st));
    if (graph.exec)
      TB_CHECK(cudaGraphLaunch(graph.exec, st));
    else
      enqueue_step();
    TB_CHECK(cudaEventRecord(ev1, st));
    if (waiter)
      waiter->wait(st, spec.comm_timeout_s);  // raises naming this rank when a peer died, hung or NCCL failed
    else
      TB_CHECK(cudaStreamSynchronize(st));
    StepStats s;
    s.step = step;
    s.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float gpu_ms = 0;
    TB_CHECK(cudaEventElapsedTime(&gpu_ms, ev0, ev1));
    for (int a = 0; a < accum; ++a) s.loss += double(h_losses[std::size_t(a)]) / (accum * world.size / pp);
    s.grad_norm = h_norm[0].norm;
    s.lr = h_scalars[0].lr;
    s.tokens_per_s = res.tokens_per_step / s.step_s;
    s.tflops = flops_per_gpu / s.step_s / 1e12;
    s.mem_gib = double(ops::device_memory_stats().peak) / kGiB;
    TB_REQUIRE(std::isfinite(s.loss) && std::isfinite(s.grad_norm),
               fmt::format("step {}: the loss ({}) or the gradient norm ({}) is not finite: lower --lr or check the "
                           "data (token ids must be below the vocabulary, {})",
                           step, s.loss, s.grad_norm, m.vocab));
    if (step == 1) {
      std::size_t fr = 0, tot = 0;
      TB_CHECK(cudaMemGetInfo(&fr, &tot));
      res.device_used_bytes = double(tot - fr);
      dc.for_each_plan([&](ops::GemmPlan&) { ++res.gemm_plans; });
      if (spec.autotune) {  // up to kCandidates x (200 ms + 20 runs) per shape: say so before the silence
        if (world.rank == 0)
          log::info("train: --autotune: timing cuBLASLt's candidates of {} GEMM shapes (up to ~{:.0f} s)",
                    res.gemm_plans, res.gemm_plans * ops::GemmPlan::kCandidates * bench::kTuneSustainMs * 1.2e-3);
        res.gemm_retuned = bench::tune_all_plans(dc);
        ops::reset_device_memory_peak();  // its scratch operands are gone: not part of a training step
      }
      const bool use_graph = spec.graph == "on" || (spec.graph == "auto" && tp == 1);  // trainer.h: tp eager
      res.graph = use_graph ? capture() : "off";
      if (res.graph != "captured" && use_graph)
        log::warn("train: running without a CUDA graph ({}); step times include launch overhead", res.graph);
    }
    if (step > spec.warmup_steps) {
      measured.push_back(s.step_s);
      measured_gpu.push_back(double(gpu_ms) * 1e-3);
    }
    res.steps.push_back(s);
    if (on_step) on_step(s);
    if (interrupted()) {
      res.interrupted = true;
      break;
    }
  }
  if (measured.empty()) measured.push_back(res.steps.back().step_s), measured_gpu.push_back(res.steps.back().step_s);
  const bench::Telemetry::Mark tm_to = telemetry.mark();
  res.step_s = summarize(measured);
  res.gpu_step_s = summarize(measured_gpu);
  res.tokens_per_s = res.tokens_per_step / res.step_s.median;
  res.tflops = flops_per_gpu / res.step_s.median / 1e12;
  res.peak_alloc_bytes = double(ops::device_memory_stats().peak);
  if (telemetry.available()) {
    const bench::TelemetrySummary ts = telemetry.summary(dc.device(), tm_from, tm_to);
    res.energy_j_per_token = ts.energy_j / (res.tokens_per_step / world.size * double(measured.size()));  // per GPU
    res.telemetry = ts;
  }

  // ---- One more step, eager, with an event after every op: the breakdown.
  if (spec.op_profile && !res.interrupted) {
    load_inputs(spec.steps + 1);
    profiling = true;
    profiler.begin();
    enqueue_step();
    for (const bench::OpTime& t : profiler.finish()) {
      res.ops.push_back({t.op, t.seconds, t.calls});
      if (t.op == "grad norm + AdamW") res.optimizer_s = t.seconds;
    }
    profiling = false;
  }
  cudaEventDestroy(ev0);
  cudaEventDestroy(ev1);
  return res;
}

}  // namespace tb::train
