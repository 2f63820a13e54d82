// Asserting luminal::Error messages in tests.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "luminal/error.hpp"

namespace luminal::testing {

/// Runs f, expecting a luminal::Error whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected luminal::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' missing from: " << msg;
  }
}

}  // namespace luminal::testing
