// project/step_model.cpp: see step_model.h.
#include "project/step_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "core/error.h"
#include "model/param_layout.h"
#include "project/moe_comm.h"
#include "project/overlap.h"

namespace tb::project {
namespace {

model::ModelConfig model_of(const recipe::Recipe& r, const recipe::Layout& l) {
  model::ModelConfig m = r.model;
  if (l.layers > 0) m.layers = l.layers;
  if (l.seq > 0) m.seq = l.seq;
  return m;
}

// LoRA: the adapters' parameters of one layer on one GPU (the base is frozen: it has no gradient to reduce and no
// update to gather). A tensor-parallel rank holds its share of each split factor and the whole of a replicated one
// (model/lora.h).
double adapter_params_per_layer(const recipe::Recipe& r, const model::ModelConfig& m, int tp) {
  model::ModelConfig c = m;
  c.lora = r.lora;
  double n = 0;
  for (const model::Slot& s : model::dense_layout(c).slots)
    if (s.has_grad()) n += double(s.size) / (s.tags.tp == model::TpRole::replicated ? 1 : tp);
  return n / c.layers;
}

const recipe::SystemRef* system_for_gpu(const std::vector<recipe::SystemRef>& systems, const std::string& gpu) {
  return gpu.empty() ? nullptr : recipe::match_system(systems, gpu);
}

// Target time / measuring-GPU time of a piece of work: its GEMM/attention part scales with the GEMM rates,
// its memory-bound part with the memory rates.
double hardware_factor(const Context& ctx, const Rates& r, const Work& w) {
  const double t = r.time_s(w);
  if (t <= 0) return 1;
  const double mu = r.mem_time_s(w) / t;
  return (1 - mu) * ctx.source_gemm_tflops / ctx.target_gemm_tflops +
         mu * ctx.source_membw_tbps / ctx.target_membw_tbps;
}

double gemm_share(const Rates& r, const Work& w) {
  const double t = r.time_s(w);
  return t > 0 ? w.gemm_flops / (r.gemm_tflops * 1e12) / t : 0;
}

double attn_share(const Rates& r, const Work& w) {
  const double t = r.time_s(w);
  return t > 0 && w.attn_flops > 0 ? w.attn_flops / (r.attn_tflops * 1e12) / t : 0;
}

}  // namespace

double expected_max_normal(int n) {
  if (n <= 1) return 0;
  // Φ⁻¹(1 − q) with q = 1 − (n − 0.375)/(n + 0.25): Newton on log Q(x) = log q, Q(x) = erfc(x/√2)/2 the upper
  // tail; log Q is concave and decreasing, so from x = 0 the iterates overshoot once and then descend to the root.
  const double q = 0.625 / (n + 0.25);
  double x = 0;
  for (int i = 0; i < 60; ++i) {
    const double tail = 0.5 * std::erfc(x / std::sqrt(2.0));
    const double density = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double dx = (std::log(tail) - std::log(q)) * tail / density;
    x += dx;
    if (std::abs(dx) < 1e-12) break;
  }
  return x;
}

std::string_view anchor_kind_name(AnchorKind k) {
  switch (k) {
    case AnchorKind::same_shard:
      return "this recipe, this shard";
    case AnchorKind::same_recipe:
      return "this recipe, another shard";
    case AnchorKind::same_model:
      return "the same model";
    case AnchorKind::same_family:
      return "the same model family";
    case AnchorKind::other:
      return "another model";
  }
  return "?";
}

Context make_context(const std::vector<recipe::Recipe>& recipes, const Inputs& in,
                     const std::vector<recipe::SystemRef>& systems, const recipe::SystemRef& target) {
  TB_REQUIRE(!in.runs.empty(),
             "the --from results hold no finished `run` record: measure the recipe's per-GPU proxy "
             "first (`trainbench run <recipe>`), then pass its results folder to --from");
  Context ctx;
  ctx.recipes = &recipes;
  ctx.runs = in.runs;
  // The measuring GPU: every run record must name one GPU model with a system file that has [compute].
  const recipe::SystemRef* source = nullptr;
  for (const Measurement& m : in.runs) {
    const recipe::SystemRef* s = system_for_gpu(systems, m.gpu);
    TB_REQUIRE(s, fmt::format("{}: the record's GPU '{}' matches no references/systems file: the projection needs its "
                              "[compute] rates to correct for the target GPU",
                              m.where, m.gpu));
    TB_REQUIRE(!source || s == source,
               fmt::format("{}: measured on {} while another record was measured on {}: give one GPU model's results",
                           m.where, s->name, source->name));
    source = s;
  }
  TB_REQUIRE(source->compute.present, fmt::format("{}: no [compute] section (gemm_bf16_tflops, membw_tbps): the "
                                                  "projection needs the measuring GPU's rates",
                                                  source->file));
  TB_REQUIRE(target.compute.present, fmt::format("{}: no [compute] section (gemm_bf16_tflops, membw_tbps): the "
                                                 "projection needs the target GPU's rates",
                                                 target.file));
  ctx.source_name = source->name, ctx.target_name = target.name;
  ctx.source_gemm_tflops = source->compute.gemm_bf16_tflops, ctx.source_membw_tbps = source->compute.membw_tbps;
  ctx.target_gemm_tflops = target.compute.gemm_bf16_tflops, ctx.target_membw_tbps = target.compute.membw_tbps;
  ctx.source = source, ctx.target = &target;

  ctx.net = network_of(target);
  ctx.net_source = target.file;
  if (in.nvlink.any()) {
    if (in.nvlink.all_reduce > 0) ctx.net.nvlink.all_reduce_gbps = in.nvlink.all_reduce;
    if (in.nvlink.all_gather > 0) ctx.net.nvlink.all_gather_gbps = in.nvlink.all_gather;
    if (in.nvlink.reduce_scatter > 0) ctx.net.nvlink.reduce_scatter_gbps = in.nvlink.reduce_scatter;
    if (in.nvlink.sendrecv > 0) ctx.net.nvlink.send_recv_gbps = in.nvlink.sendrecv;
    if (in.nvlink.all_to_all > 0) ctx.net.nvlink.all_to_all_gbps = in.nvlink.all_to_all;
    ctx.net_source = fmt::format("measured on {} GPUs ({}), the rest {}", in.nvlink.gpus, in.nvlink.where, target.file);
  }
  if (target.projection.present) {
    ctx.cal = {target.projection.reference_efficiency, target.projection.overlap_cost,
               target.projection.straggler_sigma_ms / 1e3};
    ctx.cal_source = target.file;
  } else {
    ctx.cal_source = "none (no [projection] in " + target.file + "): efficiency 1, overlap cost 0, no stragglers";
  }

  // The cost models: one layer sample per measured proxy, by precision.
  for (const Measurement& m : in.runs) {
    TB_REQUIRE(recipe::lookup_recipe(recipes, m.recipe), fmt::format("{}: unknown recipe '{}'", m.where, m.recipe));
    CostModel& cm = ctx.cost[m.precision];
    cm.samples.push_back({proxy_layer_work(m, ctx), m.f1_s});
    cm.where.push_back(m.where);
  }
  fit_cost_models(ctx);
  return ctx;
}

Work proxy_layer_work(const Measurement& m, const Context& ctx) {
  const recipe::Recipe& r = *recipe::lookup_recipe(*ctx.recipes, m.recipe);
  return layer_work(period_model(model_of(r, m.layout)), m.layout.tp, m.layout.micro_batch, m.layout.seq,
                    {m.precision == "fp8", false, m.layout.expert_tp()});
}

void fit_cost_models(Context& ctx) {
  for (auto& [precision, cm] : ctx.cost)
    if (precision != "fp8") cm.rates = fit_rates(cm.samples, ctx.source_membw_tbps);
  if (const auto fp8 = ctx.cost.find("fp8"); fp8 != ctx.cost.end()) {
    const auto bf16 = ctx.cost.find("bf16");  // attention stays bf16 in FP8 runs
    CostModel& cm = fp8->second;
    cm.attn_given_tflops = bf16 != ctx.cost.end() ? bf16->second.rates.attn_tflops : 0;
    cm.rates = fit_rates(cm.samples, ctx.source_membw_tbps, cm.attn_given_tflops);
  }
}

const CostModel& Context::cost_model(std::string_view precision) const {
  const auto it = cost.find(precision);
  TB_REQUIRE(it != cost.end(),
             fmt::format("no {} measurement: the cost model of that precision has no shard", precision));
  return it->second;
}

const Measurement* choose_anchor(const recipe::Recipe& r, std::string_view precision, const recipe::Layout& l,
                                 const Context& ctx, AnchorKind* kind) {
  const Measurement* best = nullptr;
  int best_score = -1;
  double best_dist = 0;
  AnchorKind best_kind = AnchorKind::other;
  for (const Measurement& m : ctx.runs) {
    if (m.precision != precision) continue;
    const recipe::Recipe* mr = recipe::lookup_recipe(*ctx.recipes, m.recipe);
    if (!mr) continue;
    const bool same_shard = m.layout.tp == l.tp && m.layout.cp == l.cp && m.layout.micro_batch == l.micro_batch &&
                            m.layout.seq == l.seq && m.layout.ep == l.ep && m.layout.expert_tp() == l.expert_tp();
    AnchorKind k = AnchorKind::other;
    if (mr->name == r.name)
      k = same_shard ? AnchorKind::same_shard : AnchorKind::same_recipe;
    else if (mr->preset == r.preset && !r.shape_overridden && !mr->shape_overridden)
      k = AnchorKind::same_model;
    else if (mr->model.family == r.model.family)
      k = AnchorKind::same_family;
    const int score = 4 - int(k);
    const double dist = std::abs(std::log(double(mr->model.d_model) / r.model.d_model)) + (same_shard ? 0 : 0.01);
    if (score > best_score || (score == best_score && dist < best_dist))
      best = &m, best_score = score, best_dist = dist, best_kind = k;
  }
  if (kind) *kind = best_kind;
  return best;
}

Projection project(const recipe::Recipe& r, const recipe::Layout& layout, std::string_view precision,
                   const Context& ctx, recipe::Convention convention) {
  recipe::Layout l = layout;
  if (l.layers <= 0) l.layers = r.model.layers;
  if (l.seq <= 0) l.seq = r.model.seq;
  Projection p;
  p.recipe = r.name, p.precision = std::string(precision), p.layout = l, p.convention = convention;
  p.anchor = choose_anchor(r, precision, l, ctx, &p.anchor_kind);
  TB_REQUIRE(p.anchor,
             fmt::format("no {} measurement to project {} from: run `trainbench run {} --precision {}` on one "
                         "GPU and pass its results to --from",
                         precision, r.name, r.name, precision));
  const Measurement& a = *p.anchor;
  const recipe::Recipe& ar = *recipe::lookup_recipe(*ctx.recipes, a.recipe);
  const model::ModelConfig m = model_of(r, l), am = model_of(ar, a.layout);
  const int tp = l.tp, pp = l.pp, cp = l.cp, vp = std::max(1, l.vp), mb = l.micro_batch, seq = l.seq;
  const int ep = l.ep, etp = l.expert_tp();
  const int dp = l.dp > 0 ? l.dp : l.gpus / (tp * pp * cp);
  TB_REQUIRE(dp >= 1 && mb >= 1 && l.global_batch % (mb * dp) == 0,
             fmt::format("{}: global batch {} is not a multiple of micro-batch × dp = {} × {}", l.where, l.global_batch,
                         mb, dp));
  p.grad_accum = l.global_batch / (mb * dp);
  p.layout.dp = dp;
  const double ga = p.grad_accum, eff = ctx.cal.reference_efficiency, c = ctx.cal.overlap_cost;
  const bool fp8 = precision == "fp8", own = ctx.software == Software::trainbench;

  // Per-GPU compute on the target GPU with the reference software.
  const Rates& rates = ctx.cost_model(precision).rates;
  const Work lw = layer_work(m, tp, mb, seq, {fp8, l.sequence_parallel && tp > 1, etp}), hw = head_work(m, tp, mb, seq);
  const Work alw = proxy_layer_work(a, ctx), ahw = head_work(am, a.layout.tp, a.layout.micro_batch, a.layout.seq);
  p.layer_fit_s = rates.time_s(lw);
  p.layer_scale = p.layer_fit_s / rates.time_s(alw);
  p.layer_measured_s = a.f1_s * p.layer_scale;
  p.head_scale = rates.time_s(hw) / rates.time_s(ahw);
  p.hardware_factor = hardware_factor(ctx, rates, lw);
  p.layer_s = (ctx.layer_time == LayerTime::fit ? p.layer_fit_s : p.layer_measured_s) * p.hardware_factor / eff;
  const double head_src = a.f0_s > 0 ? a.f0_s * p.head_scale : rates.time_s(hw);  // a bad fit: the cost model alone
  p.head_s = head_src * hardware_factor(ctx, rates, hw) / eff;

  // Pipeline ranks: compute, TP and CP per micro-batch.
  p.stages = stage_layers(l.layers, pp, l.pp_counts_embedding);
  const Network& net = ctx.net;
  const double act_bytes = double(mb) * (double(seq) / cp) * m.d_model * 2;
  const int tp_local = std::min(tp, net.domain_gpus);
  const double tp_ag_bytes = fp8 && !own ? act_bytes / 2 : act_bytes;  // Transformer Engine gathers FP8
  const double tp_ag = tp > 1 ? group_time_s(Coll::all_gather, tp_ag_bytes, tp, tp_local, net) : 0;
  const double tp_rs = tp > 1 ? group_time_s(Coll::reduce_scatter, act_bytes, tp, tp_local, net) : 0;
  const double kv_bytes = 2.0 * mb * (double(seq) / cp) * std::max(1.0, double(m.kv_heads) / tp) * m.head_dim * 2;
  const bool cp_inside = tp * cp <= net.domain_gpus;
  const double cp_send = cp > 1 ? ring_time_s(Coll::send_recv, kv_bytes, 2,
                                              cp_inside ? net.nvlink.send_recv_gbps : net.scaleout.send_recv_gbps,
                                              cp_inside ? net.nvlink.latency_us : net.scaleout.latency_us)
                                : 0;
  const ExpertParallelComm epc = expert_parallel_comm(m, l, net);
  const double ep_layer = epc.layer_s;
  p.ep_per_domain = epc.ep_local;
  const double layer_gemm = gemm_share(rates, lw), layer_attn = attn_share(rates, lw),
               head_gemm = gemm_share(rates, hw);
  struct Rank {
    double compute, tp, tp_exp, cp, cp_exp, ep, ep_exp, total;
  };
  auto rank = [&](double layers, bool head) {
    Rank k{};
    k.compute = (layers * p.layer_s + (head ? p.head_s : 0)) / cp;
    k.tp = own ? layers * 4 * (tp_ag + tp_rs) : layers * (6 * tp_ag + 4 * tp_rs) + (head ? 2 * tp_ag + 2 * tp_rs : 0);
    k.tp_exp =
        own ? k.tp : exposed_s(k.tp, (layers * p.layer_s * layer_gemm + (head ? p.head_s * head_gemm : 0)) / cp, c);
    k.cp = layers * 3 * (cp - 1) * cp_send;
    k.cp_exp = own ? k.cp : exposed_s(k.cp, layers * p.layer_s * layer_attn / cp, c);
    k.ep = layers * ep_layer;
    k.ep_exp = k.ep;  // between the router and the experts, nothing to hide it behind (moe_comm.h)
    k.total = k.compute + k.tp_exp + k.cp_exp + k.ep_exp;
    return k;
  };
  Rank slow = rank(p.stages.last, true);
  if (pp > 1)
    for (const Rank& k : {rank(p.stages.first, false), rank(p.stages.middle, false)})
      if (k.total > slow.total) slow = k;
  p.microbatch_s = slow.total;
  p.compute_s = ga * slow.compute;
  p.tp_comm_s = ga * slow.tp, p.tp_exposed_s = ga * slow.tp_exp;
  p.cp_comm_s = ga * slow.cp, p.cp_exposed_s = ga * slow.cp_exp;
  p.ep_comm_s = ga * slow.ep, p.ep_exposed_s = ga * slow.ep_exp;
  p.bubble_s = bubble_time_s(pp, vp, p.microbatch_s);

  // Pipeline send/recv.
  if (pp > 1) {
    const double bytes = l.sequence_parallel || tp > 1 ? act_bytes / tp : act_bytes;
    const bool cross = tp * cp * dp >= net.domain_gpus;
    const double t =
        ring_time_s(Coll::send_recv, bytes, 2, cross ? net.scaleout.send_recv_gbps : net.nvlink.send_recv_gbps,
                    cross ? net.scaleout.latency_us : net.nvlink.latency_us);
    p.pp_comm_s = ga * 2 * vp * t + 2 * (pp - 1) * t;
    p.pp_exposed_s = own ? p.pp_comm_s : exposed_s(ga * 2 * vp * t, ga * p.microbatch_s, c) + 2 * (pp - 1) * t;
  }

  // Data parallel: gradient reduce-scatter, parameter all-gather of the dense parameters over dp·cp ranks (tp apart)
  // and of the routed experts over the expert data-parallel group (edp ranks ep·etp apart), each in its own buckets;
  // LoRA: of its adapters only.
  const LayerParams lp = layer_params(m, tp, ep, etp);
  const double emb = embedding_params(m, tp);
  const int edp = std::max(1, dp * tp * cp / (ep * etp));
  const bool lora = r.lora.enabled();  // the adapters alone, in BF16
  const double dense_params =
      lora      ? adapter_params_per_layer(r, m, tp) * (pp == 1 ? l.layers : p.stages.most())
      : pp == 1 ? l.layers * lp.dense + (m.tied_embeddings ? 1 : 2) * emb
                : std::max({p.stages.first * lp.dense + emb, p.stages.middle * lp.dense,
                            p.stages.last * lp.dense + emb});
  const double expert_params = (pp == 1 ? l.layers : p.stages.most()) * lp.expert;
  struct Reduction {
    double rs = 0, ag = 0, rs_bucket = 0, ag_bucket = 0;  // all buckets; one bucket
  };
  auto reduction = [&](double params, int n, int stride) {
    Reduction x;
    if (n <= 1 || params <= 0) return x;
    const int local = std::gcd(n, std::max(1, stride >= net.domain_gpus ? 1 : std::min(n, net.domain_gpus / stride)));
    const double buckets = std::ceil(params / std::max(40e6, 1e6 * n));
    x.rs_bucket = group_time_s(Coll::reduce_scatter, (own ? 4 : 2) * params / buckets, n, local, net);
    x.ag_bucket = group_time_s(Coll::all_gather, (fp8 && !own && !lora ? 1 : 2) * params / buckets, n, local, net);
    x.rs = buckets * x.rs_bucket, x.ag = buckets * x.ag_bucket;
    return x;
  };
  const Reduction dense = reduction(dense_params, dp * cp, tp), experts = reduction(expert_params, edp, ep * etp);
  p.dp_reduce_scatter_s = dense.rs + experts.rs, p.dp_all_gather_s = dense.ag + experts.ag;
  if (p.dp_reduce_scatter_s > 0) {
    // Windows: the last micro-batch's backward (⅔ t_mb) and the first one's forward (⅓ t_mb), stretched by the
    // pipeline's cooldown and warmup: chunks finish their last backward (and need their parameters for the
    // first forward) one after another, each chunk pass 1/vp of a micro-batch.
    // The last bucket's reduce-scatter starts when the backward has ended, and the first forward waits for the
    // first bucket's all-gather: one bucket of each is never hidden.
    const double chunks = pipeline_ramp_chunks(pp, vp);
    const double rs_bucket = std::max(dense.rs_bucket, experts.rs_bucket);
    const double ag_bucket = std::max(dense.ag_bucket, experts.ag_bucket);
    p.dp_exposed_s = rs_bucket +
                     exposed_s(p.dp_reduce_scatter_s - rs_bucket, p.microbatch_s * 2 / 3 * (1 + chunks / vp), c) +
                     ag_bucket + exposed_s(p.dp_all_gather_s - ag_bucket, p.microbatch_s / 3 * (1 + chunks / vp), c);
  }

  // Optimizer (distributed: the dense parameters over dp·cp, the experts over edp; memory-bound): the anchor's
  // per-layer time per parameter of its proxy (the whole shard on one GPU) times the rank's share.
  const LayerParams alp = layer_params(period_model(am), a.layout.tp, a.layout.ep, a.layout.expert_tp());
  const double o1 = a.o1_s / alp.total() * (lp.dense / (double(dp) * cp) + lp.expert / edp);
  const double o0 = a.o0_s * embedding_params(m, tp) / embedding_params(am, a.layout.tp) / (double(dp) * cp);
  p.optimizer_s = std::max(0.0, o0 + o1 * l.layers) / pp * ctx.source_membw_tbps / ctx.target_membw_tbps / eff;

  p.step_s = ga * p.microbatch_s + p.bubble_s + p.pp_exposed_s + p.dp_exposed_s + p.optimizer_s;
  p.straggler_s = straggler_delay_s(ctx.cal.straggler_sigma_s, p.step_s, dp);
  p.step_s += p.straggler_s;
  p.tokens_per_s_per_gpu = double(l.global_batch) * seq / (p.step_s * l.gpus);
  p.tflops_per_gpu = recipe::tflops_per_gpu(p.tokens_per_s_per_gpu, recipe::flops_per_token(r, l, convention));
  const double peak = ctx.target->peak_tflops(precision);
  p.mfu = peak > 0 ? p.tflops_per_gpu / peak : 0;
  return p;
}

}  // namespace tb::project
