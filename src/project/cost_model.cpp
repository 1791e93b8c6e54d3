// project/cost_model.cpp: see cost_model.h.
#include "project/cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace tb::project {
namespace {

struct ShardDims {
  double h, d, heads, kv, ffn, vocab, mlp_gemms, act_bytes;
};

// The shard's dimensions with an MLP of width ffn (a dense layer's, or a MoE layer's active width).
ShardDims dims(const model::ModelConfig& m, int tp, double ffn) {
  TB_REQUIRE(tp >= 1, "cost model: tp must be positive");
  ShardDims s;
  s.h = m.d_model, s.d = m.head_dim;
  s.heads = double(m.heads) / tp;
  s.kv = std::max(1.0, double(m.kv_heads) / tp);
  s.ffn = ffn / tp;
  s.vocab = std::ceil(double(m.vocab) / tp);
  const bool gated = m.act == model::Act::swiglu;
  s.mlp_gemms = gated ? 3 : 2;
  s.act_bytes = gated ? 8 : 5;
  return s;
}

constexpr double kAttnRatioDefault = 0.8;  // R_attn / R_gemm with a single sample (cost_model.h)

// The MoE layers' share of m's layers.
double moe_share(const model::ModelConfig& m) { return m.moe.enabled() ? double(m.moe_layers()) / m.layers : 0; }

// A layer with an MLP of width ffn (cost_model.h).
Work mlp_layer_work(const model::ModelConfig& m, double ffn, int tp, int micro_batch, int seq, ShardKernels k) {
  const ShardDims s = dims(m, tp, ffn);
  const double b = micro_batch, t = double(seq), rows = k.sequence_parallel ? tp : 1;
  Work w;
  w.gemm_flops = 6 * b * t * s.h * ((s.heads + 2 * s.kv) * s.d + s.heads * s.d + s.mlp_gemms * s.ffn);
  w.attn_flops = 7 * b * t * t * s.heads * s.d;
  w.mem_bytes = 2 * b * t * (16 * s.h / rows + s.act_bytes * s.ffn + 6 * (s.heads + 2 * s.kv) * s.d);
  if (k.fp8) {
    const double x = 2 * s.h / rows + s.heads * s.d + s.ffn;
    const double dy = 2 * s.h / rows + (s.heads + 2 * s.kv) * s.d + (s.mlp_gemms - 1) * s.ffn;
    w.mem_bytes += 6 * b * t * (x + dy);
  }
  return w;
}

}  // namespace

Work layer_work(const model::ModelConfig& m, int tp, int micro_batch, int seq, ShardKernels k) {
  const Work dense = mlp_layer_work(m, m.ffn, tp, micro_batch, seq, k);
  const double f = moe_share(m);
  if (f == 0) return dense;
  const double kk = m.moe.top_k, etp = k.etp > 0 ? k.etp : tp, b = micro_batch, t = double(seq), h = m.d_model;
  Work moe = mlp_layer_work(m, kk * m.expert_ffn() + m.moe.shared_ffn, tp, micro_batch, seq, k);
  moe.gemm_flops += 6 * b * t * h * m.moe.experts / tp;             // the router
  moe.mem_bytes += 8 * b * t * h * (1 + kk * etp) / tp;             // permute and unpermute
  return {(1 - f) * dense.gemm_flops + f * moe.gemm_flops, (1 - f) * dense.attn_flops + f * moe.attn_flops,
          (1 - f) * dense.mem_bytes + f * moe.mem_bytes};
}

model::ModelConfig period_model(const model::ModelConfig& m) {
  model::ModelConfig p = m;
  if (m.moe.enabled()) p.layers = m.moe.every, p.moe.dense_first = 0;
  return p;
}

Work head_work(const model::ModelConfig& m, int tp, int micro_batch, int seq) {
  const ShardDims s = dims(m, tp, m.ffn);
  const double b = micro_batch, t = double(seq);
  Work w;
  w.gemm_flops = 6 * b * t * s.h * s.vocab;
  w.mem_bytes = 16 * b * t * s.vocab + 16 * b * t * s.h;
  return w;
}

LayerParams layer_params(const model::ModelConfig& m, int tp, int ep, int etp) {
  const ShardDims s = dims(m, tp, m.ffn);
  const double attention = s.h * (s.heads + 2 * s.kv) * s.d + s.heads * s.d * s.h + 2 * s.h, f = moe_share(m);
  LayerParams p;
  p.dense = attention + (1 - f) * s.mlp_gemms * s.h * s.ffn;
  if (f > 0) {
    TB_REQUIRE(ep >= 1 && m.moe.experts % ep == 0, "cost model: ep must divide the experts");
    p.dense += f * (m.moe.experts * s.h + s.mlp_gemms * s.h * m.moe.shared_ffn / tp);
    p.expert = f * double(m.moe.experts / ep) * s.mlp_gemms * s.h * m.expert_ffn() / (etp > 0 ? etp : tp);
  }
  return p;
}

double embedding_params(const model::ModelConfig& m, int tp) { return dims(m, tp, m.ffn).vocab * m.d_model; }

double Rates::mem_time_s(const Work& w) const { return mem_tbps > 0 ? w.mem_bytes / (mem_tbps * 1e12) : 0; }

double Rates::time_s(const Work& w) const {
  double t = mem_time_s(w);
  if (w.gemm_flops > 0) t += w.gemm_flops / (gemm_tflops * 1e12);
  if (w.attn_flops > 0) t += w.attn_flops / (attn_tflops * 1e12);
  return t;
}

Rates fit_rates(std::span<const LayerSample> samples, double mem_tbps, double attn_tflops) {
  TB_REQUIRE(!samples.empty(), "cost model: no measured layer to fit the rates to");
  TB_REQUIRE(mem_tbps > 0, "cost model: the memory rate must be positive");
  Rates r;
  r.mem_tbps = mem_tbps;
  if (attn_tflops > 0) {  // y_i = (t_i − mem_i − attn_i/R_attn) / t_i = x·g_i/t_i
    r.attn_tflops = attn_tflops;
    double sgg = 0, sgy = 0;
    for (const LayerSample& s : samples) {
      TB_REQUIRE(s.seconds > 0, "cost model: a measured layer time must be positive");
      const double g = s.work.gemm_flops / s.seconds;
      const double rest = r.mem_time_s(s.work) + s.work.attn_flops / (attn_tflops * 1e12);
      sgg += g * g, sgy += g * (s.seconds - rest) / s.seconds;
    }
    TB_REQUIRE(sgg > 0 && sgy > 0, "cost model: the measured layer times leave no time for the GEMMs");
    r.gemm_tflops = 1e-12 / (sgy / sgg);
    return r;
  }
  // y_i = (t_i − mem_i) / t_i = x·g_i/t_i + z·a_i/t_i, x = 1/R_gemm, z = 1/R_attn (seconds per FLOP).
  double sgg = 0, sga = 0, saa = 0, sgy = 0, say = 0;
  for (const LayerSample& s : samples) {
    TB_REQUIRE(s.seconds > 0, "cost model: a measured layer time must be positive");
    const double g = s.work.gemm_flops / s.seconds, a = s.work.attn_flops / s.seconds;
    const double y = (s.seconds - r.mem_time_s(s.work)) / s.seconds;
    sgg += g * g, sga += g * a, saa += a * a, sgy += g * y, say += a * y;
  }
  const double det = sgg * saa - sga * sga;
  double x = 0, z = 0;
  if (samples.size() >= 2 && det > 1e-12 * sgg * saa) {
    x = (sgy * saa - say * sga) / det;
    z = (say * sgg - sgy * sga) / det;
  }
  if (!(x > 0 && z > 0)) {  // one sample, or an ill-posed fit: one scale with R_attn = 0.8 R_gemm
    double num = 0, den = 0;
    for (const LayerSample& s : samples) {
      const double u = (s.work.gemm_flops + s.work.attn_flops / kAttnRatioDefault) / s.seconds;
      num += u * (s.seconds - r.mem_time_s(s.work)) / s.seconds, den += u * u;
    }
    TB_REQUIRE(den > 0 && num > 0, "cost model: the measured layer times leave no time for the GEMMs");
    x = num / den, z = x / kAttnRatioDefault;
  }
  r.gemm_tflops = 1e-12 / x;
  r.attn_tflops = 1e-12 / z;
  return r;
}

std::vector<double> leave_one_out_errors(std::span<const LayerSample> samples, double mem_tbps, double attn_tflops) {
  std::vector<double> out;
  if (samples.size() < (attn_tflops > 0 ? 2u : 3u)) return out;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    std::vector<LayerSample> rest;
    for (std::size_t j = 0; j < samples.size(); ++j)
      if (j != i) rest.push_back(samples[j]);
    const Rates r = fit_rates(rest, mem_tbps, attn_tflops);
    out.push_back(r.time_s(samples[i].work) / samples[i].seconds - 1);
  }
  return out;
}

}  // namespace tb::project
