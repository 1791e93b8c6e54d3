// ops/cuda/cudnn_graph.h: what the translation units that build cudnn-frontend graphs share (attention.cpp: bf16
// SDPA, attention_fp8.cpp: FP8 SDPA): the frontend include, TB_CHECK on the frontend's error_t (cudnn.h says why
// these overloads live here and not in cudnn.h: the frontend headers are heavy), and the one way a graph is built.
// Include it from .cpp files only.
//   TB_CHECK(g.validate()) on a bad graph throws Error{unsupported} for GRAPH_NOT_SUPPORTED (with the frontend's
//   reason, e.g. "hidden_dim shoud be equal to 128 ..."), Error{cudnn} for every other frontend code.
#pragma once

#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>

#include "ops/cuda/cudnn.h"

// The overloads must be declared directly in tb (not in a nested namespace) for TB_CHECK's qualified ::tb::ok
// lookup; inline, so the translation units that include this share one definition.
namespace tb {

inline std::string_view frontend_code_name(cudnn_frontend::error_code_t code) {
  using cudnn_frontend::error_code_t;
  switch (code) {
    case error_code_t::OK: return "OK";
    case error_code_t::ATTRIBUTE_NOT_SET: return "ATTRIBUTE_NOT_SET";
    case error_code_t::SHAPE_DEDUCTION_FAILED: return "SHAPE_DEDUCTION_FAILED";
    case error_code_t::INVALID_TENSOR_NAME: return "INVALID_TENSOR_NAME";
    case error_code_t::INVALID_VARIANT_PACK: return "INVALID_VARIANT_PACK";
    case error_code_t::GRAPH_NOT_SUPPORTED: return "GRAPH_NOT_SUPPORTED";
    case error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED: return "GRAPH_EXECUTION_PLAN_CREATION_FAILED";
    case error_code_t::GRAPH_EXECUTION_FAILED: return "GRAPH_EXECUTION_FAILED";
    case error_code_t::HEURISTIC_QUERY_FAILED: return "HEURISTIC_QUERY_FAILED";
    case error_code_t::UNSUPPORTED_GRAPH_FORMAT: return "UNSUPPORTED_GRAPH_FORMAT";
    case error_code_t::CUDA_API_FAILED: return "CUDA_API_FAILED";
    case error_code_t::CUDNN_BACKEND_API_FAILED: return "CUDNN_BACKEND_API_FAILED";
    case error_code_t::INVALID_CUDA_DEVICE: return "INVALID_CUDA_DEVICE";
    case error_code_t::HANDLE_ERROR: return "HANDLE_ERROR";
    case error_code_t::INVALID_VALUE: return "INVALID_VALUE";
  }
  return "UNKNOWN_FRONTEND_ERROR";
}

inline bool ok(const cudnn_frontend::error_t& e) { return e.is_good(); }

[[noreturn]] inline void raise(const cudnn_frontend::error_t& e, const char* expr, std::source_location where) {
  raise_frontend(frontend_code_name(e.code), e.err_msg,
                 e.code == cudnn_frontend::error_code_t::GRAPH_NOT_SUPPORTED, expr, where);
}

}  // namespace tb

namespace tb::ops {

// Validate, lower, ask the heuristic (mode A), check support, build the first supported plan; report its
// workspace bytes and engine name.
inline void build_graph(cudnn_frontend::graph::Graph& g, cudnnHandle_t handle, std::int64_t& workspace,
                        std::string& engine) {
  TB_CHECK(g.validate());
  TB_CHECK(g.build_operation_graph(handle));
  TB_CHECK(g.create_execution_plans({cudnn_frontend::HeurMode_t::A}));
  TB_CHECK(g.check_support());
  TB_CHECK(g.build_plans(cudnn_frontend::BuildPlanPolicy_t::HEURISTICS_CHOICE));
  TB_CHECK(g.get_workspace_size(workspace));
  TB_CHECK(g.get_plan_name(engine));
}

// A plan's two built graphs (forward, backward) with the workspace each needs and the engine cuDNN chose for it.
struct GraphPair {
  std::shared_ptr<cudnn_frontend::graph::Graph> fwd, bwd;
  std::int64_t fwd_ws = 0, bwd_ws = 0;
  std::string fwd_engine, bwd_engine;
  // "attention <shape> | fwd <engine> (<ws> B ws) | bwd <engine> (<ws> B ws)", what results record.
  std::string describe(const std::string& op_and_shape) const {
    return op_and_shape + " | fwd " + fwd_engine + " (" + std::to_string(fwd_ws) + " B ws) | bwd " + bwd_engine + " (" +
           std::to_string(bwd_ws) + " B ws)";
  }
};

// From a catch (...) around building `what` (e.g. "attention backward b=1 s=8192 ..."): rethrows the exception in
// flight as a tb::Error that names it, keeping a tb::Error's kind (unsupported / cudnn) and detail; the frontend's
// std exceptions (a few helpers throw std::runtime_error) become Error{cudnn}.
[[noreturn]] inline void rethrow_graph_error(const std::string& what) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.kind(), e.fatal(), what + ": " + e.what(), e.detail());
  } catch (const std::exception& e) {
    raise_error(Error::Kind::cudnn, what + ": cudnn-frontend: " + e.what());
  }
}

}  // namespace tb::ops
