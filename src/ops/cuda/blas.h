// ops/cuda/blas.h: cuBLASLt status checks for TB_CHECK, an owned cuBLASLt handle, owned descriptors.
//   TB_CHECK(cublasLtMatmul(...)) throws tb::Error{cublas} with the status name and text, e.g.
//   "cublas error CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported) in ops/...".
// cuBLASLt's own cublasLtGetStatusName/String are used (same texts as cuBLAS's), so tb_ops links only
// cuBLASLt.
#pragma once

#include <cublasLt.h>

#include <source_location>
#include <string>
#include <utility>

#include "core/error.h"

namespace tb {

inline bool ok(cublasStatus_t status) { return status == CUBLAS_STATUS_SUCCESS; }
// fatal only when an execution failure left a sticky CUDA error behind (the context is gone).
[[noreturn]] void raise(cublasStatus_t status, const char* expr, std::source_location where);

}  // namespace tb

namespace tb::ops {

// "13.0.2": the cuBLASLt loaded at run time (cublasLtGetVersion = major*10000 + minor*100 + patch).
std::string cublaslt_version();

// An owned cuBLASLt object: T is the opaque handle type, Destroy its destroy function.
template <class T, cublasStatus_t (*Destroy)(T)>
class LtOwned {
 public:
  LtOwned() = default;
  ~LtOwned() { reset(); }
  LtOwned(LtOwned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  LtOwned& operator=(LtOwned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  LtOwned(const LtOwned&) = delete;
  LtOwned& operator=(const LtOwned&) = delete;

  T get() const { return p_; }
  T* out() {  // for the Create functions: releases what was held, then hands out the slot
    reset();
    return &p_;
  }
  void reset() {
    if (p_) Destroy(p_);  // destroy statuses are ignored: nothing useful can be done in a destructor
    p_ = nullptr;
  }

 private:
  T p_ = nullptr;
};

// The cuBLASLt handle of one device; create it with that device current.
class LtHandle {
 public:
  LtHandle();
  cublasLtHandle_t get() const { return h_.get(); }

 private:
  LtOwned<cublasLtHandle_t, cublasLtDestroy> h_;
};

}  // namespace tb::ops
