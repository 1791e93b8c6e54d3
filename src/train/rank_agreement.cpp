// train/rank_agreement.cpp: the ranks' configuration check (rank_agreement.h).
#include "train/rank_agreement.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tb::train {
namespace {

std::string text(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string s;
  for (const auto& [name, value] : fields) s += name + "=" + value + "\n";
  return s;
}

std::vector<std::pair<std::string, std::string>> parse(const std::string& s) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t eq = s.find('=', at), nl = s.find('\n', at);
    out.emplace_back(s.substr(at, eq - at), s.substr(eq + 1, nl - eq - 1));
    at = nl + 1;
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> spec_fields(const TrainSpec& s) {
  auto num = [](double v) { return fmt::format("{}", v); };
  const std::string shard =
      s.model_config ? fmt::format("{} L{} d{} heads {}/{}x{} ffn {} vocab {} seq {}", s.model_config->name,
                                   s.model_config->layers, s.model_config->d_model, s.model_config->heads,
                                   s.model_config->kv_heads, s.model_config->head_dim, s.model_config->ffn,
                                   s.model_config->vocab, s.model_config->seq)
                     : "";
  return {{"model", s.model},
          {"model_config", shard},
          {"layers", num(s.layers)},
          {"seq", num(s.seq)},
          {"micro_batch", num(s.micro_batch)},
          {"global_batch", num(s.global_batch)},
          {"steps", num(s.steps)},
          {"warmup_steps", num(s.warmup_steps)},
          {"device", s.device},
          {"data", s.data},
          {"token_type", s.token_type},
          {"lr", num(s.lr)},
          {"min_lr", num(s.min_lr)},
          {"lr_warmup", num(s.lr_warmup)},
          {"weight_decay", num(s.weight_decay)},
          {"clip", num(s.clip)},
          {"beta1", num(s.beta1)},
          {"beta2", num(s.beta2)},
          {"eps", num(s.eps)},
          {"seed", std::to_string(s.seed)},
          {"convention", std::string(model::convention_name(s.convention))},
          {"dp", num(s.dp)},
          {"tp", num(s.tp)},
          {"pp", num(s.pp)},
          {"vp", num(s.vp)},
          {"cp", num(s.cp)},
          {"recompute", s.recompute},
          {"moments", s.moments},
          {"grads", s.grads},
          {"master", s.master},
          {"grad_buffer", s.grad_buffer},
          {"graph", s.graph},
          {"autotune", num(s.autotune)},
          {"op_profile", num(s.op_profile)},
          {"deterministic", num(s.deterministic)},
          {"comm_timeout_s", num(s.comm_timeout_s)},
          {"share_gpus", num(s.share_gpus)},
          {"debug_delay_rank", num(s.debug_delay_rank)},
          {"debug_delay_ms", num(s.debug_delay_ms)},
          {"precision", s.precision},
          {"fp8_recipe", s.fp8_recipe},
          {"fp8_format", s.fp8_format},
          {"fp8_history", num(s.fp8_history)},
          {"fp8_amax", s.fp8_amax},
          {"fp8_margin", num(s.fp8_margin)},
          {"fp8_reduce_amax", num(s.fp8_reduce_amax)},
          {"fp8_lm_head", num(s.fp8_lm_head)},
          {"fp8_lm_head_grad", s.fp8_lm_head_grad},
          {"fp8_lm_head_gemms", s.fp8_lm_head_gemms},
          {"fp8_lm_head_rounding", s.fp8_lm_head_rounding},
          {"fp8_weight_cast", s.fp8_weight_cast},
          {"fp8_grad_rounding", s.fp8_grad_rounding},
          {"fp8_attention", num(s.fp8_attention)},
          {"fp8_attention_emulate", s.fp8_attention_emulate}};
}

void check_ranks_agree(const TrainSpec& spec, comm::Communicator& world) {
  if (world.size() < 2) return;
  const auto mine = spec_fields(spec);
  const std::string my_text = text(mine);
  const std::string root_text = world.broadcast_text(my_text, 0);
  if (root_text == my_text) return;  // the ranks whose fields differ from rank 0's report
  const auto root = parse(root_text);
  std::string diff;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const std::string theirs = i < root.size() && root[i].first == mine[i].first ? root[i].second : "?";
    if (theirs != mine[i].second)
      diff += fmt::format("{}{} {} (rank 0: {})", diff.empty() ? "" : ", ", mine[i].first, mine[i].second, theirs);
  }
  raise_config(fmt::format("this rank's configuration differs from rank 0's: {}; every rank of the job must run the "
                           "same command",
                           diff));
}

}  // namespace tb::train
