// recipe/moe_proxy.cpp: see moe_proxy.h.
#include "recipe/moe_proxy.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tb::recipe {

MoeProxy moe_proxy(const model::ModelConfig& m, const Layout& l) {
  const auto fail = [&](const std::string& msg) { raise_config(fmt::format("{}: {}", l.where, msg)); };
  MoeProxy p;
  p.ep = l.ep, p.etp = l.expert_tp();
  if (m.moe.experts % p.ep != 0)
    fail(fmt::format("experts={} is not divisible by ep={} (an ep rank holds experts / ep of them)", m.moe.experts, p.ep));
  if (l.tp % p.etp != 0)
    fail(fmt::format("the one-device proxy of a MoE layer runs a tp·cp/etp rank's rows, which needs etp={} to divide "
                     "tp={} (set etp to a divisor of tp)",
                     p.etp, l.tp));
  if (m.expert_ffn() % p.etp != 0 || m.moe.shared_ffn % p.etp != 0)
    fail(fmt::format("expert_ffn={} and shared_ffn={} must be divisible by etp={} (expert tensor parallel splits them)",
                     m.expert_ffn(), m.moe.shared_ffn, p.etp));
  p.token_share = l.tp / p.etp;
  if ((l.micro_batch * l.seq) % p.token_share != 0)
    fail(fmt::format("micro_batch·seq = {}·{} rows do not split into tp/etp = {} shares", l.micro_batch, l.seq,
                     p.token_share));
  p.local_experts = m.moe.experts / p.ep;
  p.expert_ffn = m.expert_ffn() / p.etp;
  p.shared_ffn = m.moe.shared_ffn / p.etp;
  return p;
}

void apply_moe_proxy(const MoeProxy& p, model::ModelConfig& shard) {
  shard.moe.ep_proxy = p.ep;
  shard.moe.token_share = p.token_share;
  shard.moe.expert_ffn = p.expert_ffn;
  shard.moe.shared_ffn = p.shared_ffn;
}

double expert_param_share(const model::ModelConfig& s) {
  if (!s.moe.enabled()) return 0;
  const double d = s.d_model, gemms = s.act == model::Act::swiglu ? 3 : 2, every = std::max(1, s.moe.every);
  const double attention = d * (s.heads + 2.0 * s.kv_heads) * s.head_dim + double(s.heads) * s.head_dim * d + 2 * d;
  const double experts = double(s.moe.local_experts()) * gemms * d * s.expert_ffn();
  const double moe_rest = double(s.moe.experts) * d + gemms * d * s.moe.shared_ffn;  // router, shared experts
  const double dense_mlp = gemms * d * s.ffn;
  const double period = every * attention + (every - 1) * dense_mlp + experts + moe_rest;
  return experts / period;
}

std::vector<std::string> moe_proxy_differences(const model::ModelConfig& m, const Layout& l, const MoeProxy& p) {
  std::vector<std::string> out;
  out.push_back(fmt::format(
      "MoE layers: an ep rank's {} of {} experts (ep {}) compute the top-{} pairs their ep group routes to them, "
      "balanced, without the all-to-all{}",
      p.local_experts, m.moe.experts, p.ep, m.moe.top_k, p.etp > 1 ? " and the etp all-gather" : ""));
  if (p.token_share > 1 || l.cp > 1)
    out.push_back(fmt::format("the MoE MLP runs on 1/{} of the micro-batch's rows: a rank's share of tp·cp/etp = "
                              "{}·{}/{}, with the cp split extrapolated like the rest of the micro-batch",
                              p.token_share, l.tp, l.cp, p.etp));
  if (p.etp > 1)
    out.push_back(fmt::format("experts of width {}/{} = {} (expert tensor parallel {}) on the etp group's rows",
                              m.expert_ffn(), p.etp, p.expert_ffn, p.etp));
  if (m.moe.shared_ffn > 0 && p.etp != l.tp)
    out.push_back(fmt::format("shared experts of width {} on those rows (the rank's FLOPs: width {}/{} on the tp group's rows)",
                              p.shared_ffn, m.moe.shared_ffn, l.tp));
  return out;
}

int moe_point(const model::ModelConfig& m, int layers) {
  const int first = m.moe.dense_first, every = std::max(1, m.moe.every);
  const int periods = std::max(1, (layers - first + every - 1) / every);
  return first + every * periods;
}

bool is_moe_point(const model::ModelConfig& m, int layers) { return moe_point(m, layers) == layers; }

}  // namespace tb::recipe
