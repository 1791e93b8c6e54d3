// train/rank_agreement.cpp: the ranks' configuration check (rank_agreement.h).
#include "train/rank_agreement.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/build_info.h"
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

std::string file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::uint64_t h = 14695981039346656037ull;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0)
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ std::uint8_t(buf[i])) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

std::vector<std::pair<std::string, std::string>> spec_fields(const TrainSpec& s) {
  auto num = [](double v) { return fmt::format("{}", v); };
  auto named = [](auto v) { return std::string(name(v)); };  // an enum by its name (train/spec.h)
  const std::string shard = s.model.config
                                ? fmt::format("{} L{} d{} heads {}/{}x{} ffn {} vocab {} seq {}", s.model.config->name,
                                              s.model.config->layers, s.model.config->d_model, s.model.config->heads,
                                              s.model.config->kv_heads, s.model.config->head_dim, s.model.config->ffn,
                                              s.model.config->vocab, s.model.config->seq)
                                : "";
  const BuildInfo& b = build_info();
  std::error_code ec;
  const auto data_bytes = std::filesystem::file_size(s.run.data, ec);  // a token file's; synthetic tasks have none
  return {{"binary", fmt::format("{} {} {}", b.version, b.git_describe, b.built_at)},
          {"model", s.model.preset},
          {"model_config", shard},
          {"layers", num(s.model.layers)},
          {"seq", num(s.model.seq)},
          {"micro_batch", num(s.batch.micro)},
          {"global_batch", num(s.batch.global)},
          {"steps", num(s.run.steps)},
          {"warmup_steps", num(s.run.warmup_steps)},
          {"device", named(s.run.device)},
          {"data", s.run.data},
          {"data_bytes", ec ? "" : std::to_string(data_bytes)},
          {"token_type", named(s.run.token_type)},
          {"lr", num(s.optimizer.lr)},
          {"min_lr", num(s.optimizer.min_lr)},
          {"lr_warmup", num(s.optimizer.lr_warmup)},
          {"weight_decay", num(s.optimizer.weight_decay)},
          {"clip", num(s.optimizer.clip)},
          {"beta1", num(s.optimizer.beta1)},
          {"beta2", num(s.optimizer.beta2)},
          {"eps", num(s.optimizer.eps)},
          {"seed", std::to_string(s.run.seed)},
          {"lora_rank", s.lora.rank ? num(*s.lora.rank) : ""},
          {"lora_alpha", num(s.lora.alpha.value_or(0))},
          {"lora_dropout", num(s.lora.dropout.value_or(0))},
          {"lora_targets", s.lora.targets ? model::lora_targets_name(*s.lora.targets) : ""},
          {"lora_freeze_base", num(s.lora.freeze_base)},
          {"convention", std::string(model::convention_name(s.run.convention))},
          {"dp", num(s.parallel.dp)},
          {"tp", num(s.parallel.tp)},
          {"pp", num(s.parallel.pp)},
          {"vp", num(s.parallel.vp)},
          {"cp", num(s.parallel.cp)},
          {"ep", num(s.parallel.ep)},
          {"recompute", named(s.memory.recompute)},
          {"moments", named(s.optimizer.moments)},
          {"grads", named(s.memory.grads)},
          {"master", named(s.optimizer.master)},
          {"grad_buffer", named(s.memory.grad_buffer)},
          {"graph", named(s.run.graph)},
          {"autotune", num(s.run.autotune)},
          {"op_profile", num(s.run.op_profile)},
          {"deterministic", num(s.run.deterministic)},
          {"comm_timeout_s", num(s.parallel.comm_timeout_s)},
          {"share_gpus", num(s.parallel.share_gpus)},
          {"debug_delay_rank", num(s.debug.delay_rank)},
          {"debug_delay_ms", num(s.debug.delay_ms)},
          {"precision", named(s.precision.linear)},
          {"fp8_recipe", named(s.precision.fp8.recipe)},
          {"fp8_format", named(s.precision.fp8.format)},
          {"fp8_history", num(s.precision.fp8.history)},
          {"fp8_amax", named(s.precision.fp8.amax)},
          {"fp8_margin", num(s.precision.fp8.margin)},
          {"fp8_reduce_amax", num(s.precision.fp8.reduce_amax)},
          {"fp8_lm_head", num(s.precision.fp8.lm_head)},
          {"fp8_lm_head_grad", s.debug.fp8_head_grad ? named(*s.debug.fp8_head_grad) : ""},
          {"fp8_lm_head_gemms", head_gemm_names(s.debug.fp8_head_gemms)},
          {"fp8_lm_head_rounding", s.debug.fp8_head_rounding ? named(*s.debug.fp8_head_rounding) : ""},
          {"fp8_weight_cast", named(s.precision.fp8.weight_cast)},
          {"fp8_grad_rounding", named(s.debug.fp8_grad_rounding)},
          {"fp8_attention", num(s.precision.fp8.attention)},
          {"fp8_attention_emulate", attention_emulation_name(s.debug.fp8_attention_emulate)}};
}

void check_ranks_agree(const TrainSpec& spec, comm::Communicator& world, const Fields& extra) {
  if (world.size() < 2) return;
  Fields mine = spec_fields(spec);
  mine.insert(mine.end(), extra.begin(), extra.end());
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
