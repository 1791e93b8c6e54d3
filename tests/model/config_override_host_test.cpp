// Tests model/config_override (host only): every key of `train --set` changes its field and nothing else; later
// overrides win; the result is named after the preset and its overrides, and no overrides leave the preset as it
// is; unknown keys (with the nearest key), a missing '=', and bad values of each kind raise config errors naming
// the key and what it takes. The MLA keys make a valid multi-head latent attention model, and MLA sizes that do not fit
// together are named. Also model/param_layout's cuda_layout_problem on the presets and bad shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/config_override.h"
#include "model/param_layout.h"

namespace {

using tb::model::ModelConfig;

ModelConfig over(const std::string& preset, std::vector<std::string> sets) {
  return tb::model::with_overrides(tb::model::preset(preset), sets);
}

std::string error_of(std::vector<std::string> sets) {
  try {
    over("llama3.1-8b", std::move(sets));
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ConfigOverride, EveryKeySetsItsField) {
  const ModelConfig m = over("llama3.1-8b", {"layers=3", "d_model=2048", "ffn=5632", "heads=16", "kv_heads=4",
                                             "head_dim=64", "vocab=32000", "seq=1024", "norm=layernorm1p", "act=sqrelu",
                                             "pos=learned", "tied=true", "rope_theta=10000", "rope_scaling=off",
                                             "norm_eps=1e-6"});
  EXPECT_EQ(m.layers, 3);
  EXPECT_EQ(m.d_model, 2048);
  EXPECT_EQ(m.ffn, 5632);
  EXPECT_EQ(m.heads, 16);
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.vocab, 32000);
  EXPECT_EQ(m.seq, 1024);
  EXPECT_EQ(m.norm, tb::model::Norm::layernorm1p);
  EXPECT_EQ(m.act, tb::model::Act::sqrelu);
  EXPECT_EQ(m.pos, tb::model::Pos::learned);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_FALSE(m.rope_scaling.enabled);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.family, "llama");
  m.validate();
}

TEST(ConfigOverride, MoeKeysSetTheirFields) {
  const ModelConfig m = over("mixtral-8x7b", {"experts=16", "top_k=4", "capacity_factor=1.25", "pad_to_capacity=true",
                                              "bias_update_rate=0.001", "routing=balanced", "router_normalize=false",
                                              "routed_scale=2.5"});
  EXPECT_EQ(m.moe.experts, 16);
  EXPECT_EQ(m.moe.top_k, 4);
  EXPECT_EQ(m.moe.capacity_factor, 1.25);
  EXPECT_TRUE(m.moe.pad_to_capacity);
  EXPECT_EQ(m.moe.bias_update_rate, 0.001);
  EXPECT_EQ(m.moe.routing, tb::model::Routing::balanced);
  EXPECT_FALSE(m.moe.normalize);
  EXPECT_EQ(m.moe.scale, 2.5);
  m.validate();
  EXPECT_NE(error_of({"pad_to_capacity=yes"}).find("pad_to_capacity"), std::string::npos);
}

TEST(ConfigOverride, OneKeyChangesOnlyItsField) {
  const ModelConfig& base = tb::model::preset("llama3.1-8b");
  ModelConfig m = over("llama3.1-8b", {"ffn=8192"});
  EXPECT_EQ(m.ffn, 8192);
  m.ffn = base.ffn, m.name = base.name;
  EXPECT_EQ(m.d_model, base.d_model);
  EXPECT_EQ(m.heads, base.heads);
  EXPECT_EQ(m.kv_heads, base.kv_heads);
  EXPECT_EQ(m.vocab, base.vocab);
  EXPECT_EQ(m.act, base.act);
  EXPECT_EQ(m.rope_scaling.enabled, base.rope_scaling.enabled);
  EXPECT_EQ(m.rope_theta, base.rope_theta);
}

TEST(ConfigOverride, NamesTheOverridesAndLaterOnesWin) {
  const ModelConfig m = over("small", {"layers=2", "d_model=512", "layers=6"});
  EXPECT_EQ(m.layers, 6);
  EXPECT_EQ(m.name, "small[layers=2,d_model=512,layers=6]");
  EXPECT_EQ(over("small", {}).name, "small");
}

TEST(ConfigOverride, BadInputNamesTheKeyAndWhatItTakes) {
  EXPECT_NE(error_of({"dmodel=4096"}).find("unknown key 'dmodel' (did you mean 'd_model'?); keys: layers, d_model"),
            std::string::npos);
  EXPECT_NE(error_of({"d_model"}).find("expected key=value"), std::string::npos);
  EXPECT_NE(error_of({"=4"}).find("expected key=value"), std::string::npos);
  for (const char* v : {"0", "-8", "abc", "12x", "", "1.5", "99999999999"})
    EXPECT_NE(error_of({std::string("heads=") + v}).find("heads takes a positive integer"), std::string::npos) << v;
  for (const char* v : {"0", "-1", "nan", "inf", "x", ""})
    EXPECT_NE(error_of({std::string("rope_theta=") + v}).find("rope_theta takes a positive number"), std::string::npos)
        << v;
  EXPECT_NE(error_of({"act=relu"}).find("act takes swiglu | gelu | sqrelu"), std::string::npos);
  EXPECT_NE(error_of({"norm=batchnorm"}).find("norm takes rmsnorm | layernorm | layernorm1p"), std::string::npos);
  EXPECT_NE(error_of({"pos=alibi"}).find("pos takes rope | learned"), std::string::npos);
  EXPECT_NE(error_of({"tied=yes"}).find("tied takes true | false"), std::string::npos);
  EXPECT_NE(error_of({"rope_scaling=true"}).find("rope_scaling takes on | off"), std::string::npos);
}

TEST(ConfigOverride, MlaKeysMakeALatentAttentionModel) {
  const ModelConfig m = over("small", {"attention=mla", "q_lora_rank=0", "kv_lora_rank=64", "qk_nope_head_dim=32",
                                       "qk_rope_head_dim=16", "v_head_dim=24", "kv_heads=4", "head_dim=48"});
  EXPECT_EQ(m.attention, tb::model::AttentionKind::mla);
  EXPECT_EQ(m.mla.q_lora_rank, 0);
  EXPECT_EQ(m.mla.kv_lora_rank, 64);
  EXPECT_EQ(m.mla.qk_nope_head_dim, 32);
  EXPECT_EQ(m.mla.qk_rope_head_dim, 16);
  EXPECT_EQ(m.mla.v_head_dim, 24);
  EXPECT_TRUE(m.layer(1).attention == tb::model::AttentionKind::mla && !m.layer(1).moe);
  EXPECT_EQ(m.rope_dim(), 16);
  EXPECT_NO_THROW(m.validate());
  auto invalid = [](const std::string& preset, std::vector<std::string> sets) {
    try {
      over(preset, std::move(sets)).validate();
    } catch (const tb::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // MLA sizes on a grouped-query model; a head_dim or kv_heads that does not match; no RoPE; a size of 0
  EXPECT_NE(invalid("small", {"kv_lora_rank=64"}).find("set attention=mla"), std::string::npos);
  EXPECT_NE(invalid("tiny-mla", {"qk_rope_head_dim=16"}).find("head_dim=32 (got 24)"), std::string::npos);
  EXPECT_NE(invalid("tiny-mla", {"kv_heads=2"}).find("set kv_heads=4 (got 2)"), std::string::npos);
  EXPECT_NE(invalid("tiny-mla", {"pos=learned"}).find("needs pos=rope"), std::string::npos);
  EXPECT_NE(invalid("small", {"attention=mla", "kv_heads=4"}).find("kv_lora_rank, qk_nope_head_dim"),
            std::string::npos);
  EXPECT_NE(error_of({"attention=mha"}).find("attention takes gqa | mla"), std::string::npos);
  EXPECT_NE(error_of({"q_lora_rank=-1"}).find("q_lora_rank takes a positive integer"), std::string::npos);
  EXPECT_NE(error_of({"kv_lora_rank=0"}).find("kv_lora_rank takes a positive integer"), std::string::npos);
  for (const char* name : {"deepseek-v3-671b", "tiny-mla", "small-mla"})
    EXPECT_NO_THROW(tb::model::preset(name).validate());
}

TEST(CudaLayoutProblem, PresetsRunAndBadShapesAreNamed) {
  for (const char* name : {"llama3.1-8b", "llama3.1-70b", "nemotron4-15b", "gpt3-175b", "mistral-7b", "small",
                           "small-gpt", "small-hd128", "small-mla", "deepseek-v3-671b"}) {
    const ModelConfig& c = tb::model::preset(name);
    EXPECT_EQ(tb::model::cuda_layout_problem(c, tb::model::dense_layout(c)), "") << name;
  }
  auto problem = [](const ModelConfig& c) { return tb::model::cuda_layout_problem(c, tb::model::dense_layout(c)); };
  EXPECT_NE(problem(tb::model::preset("tiny")).find("not a multiple of 128"), std::string::npos);
  EXPECT_NE(problem(over("small", {"d_model=200"})).find("starts at element"), std::string::npos);
  EXPECT_NE(problem(over("small", {"head_dim=100"})).find("head_dim 100 is not a multiple of 8"), std::string::npos);
  EXPECT_NE(problem(over("small", {"heads=8", "kv_heads=8", "head_dim=24"})).find("RoPE on CUDA needs head_dim"),
            std::string::npos);
  EXPECT_EQ(problem(over("small-gpt", {"heads=8", "kv_heads=8", "head_dim=32"})), "");  // learned positions
  EXPECT_NE(problem(over("small-mla", {"qk_rope_head_dim=8", "head_dim=136"})).find("qk_rope_head_dim a multiple"),
            std::string::npos);
  EXPECT_NE(problem(over("small-mla", {"v_head_dim=100"})).find("multiples of 8, got 100"), std::string::npos);
}

}  // namespace
