// tests/support/config_error.h: the message of the tb::Error a call throws, checked to be a configuration error
// (kind config; error_message: of any kind), or `none` when it throws nothing: for tests that match what a refusal
// says.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace tb::testing_support {

template <class F>
std::string error_message(F&& call, std::string none = "no error") {
  try {
    std::forward<F>(call)();
  } catch (const Error& e) {
    return e.what();
  }
  return none;
}

template <class F>
std::string config_error(F&& call, std::string none = "no error") {
  try {
    std::forward<F>(call)();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::config) << e.what();
    return e.what();
  }
  return none;
}

}  // namespace tb::testing_support
