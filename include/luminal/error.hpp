// Errors: luminal::Error for user mistakes (bad shape, bad file, unsupported op) and
// luminal::InternalError for broken invariants inside luminal itself.
//
//   LUM_CHECK(a.rank() == b.rank()) << "Add: rank mismatch " << a.rank() << " vs " << b.rank();
//   LUM_ASSERT(id < size) << "node id out of range";
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace luminal {

/// A user-facing error: the message names what is wrong (op, shapes, axis, file).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bug inside luminal: an invariant that user input cannot break was broken.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {

/// Collects a message with operator<< and throws it when handed to ErrorThrower.
class ErrorMessage {
 public:
  ErrorMessage(const char* prefix) { os_ << prefix; }
  template <class T>
  ErrorMessage& operator<<(const T& value) {
    os_ << value;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

template <class E>
struct ErrorThrower {
  // operator& binds more loosely than <<, so the whole message is built first.
  [[noreturn]] void operator&(const ErrorMessage& m) const { throw E(m.str()); }
};

}  // namespace detail
}  // namespace luminal

// The switch makes `if (a) LUM_CHECK(b) << ...; else ...` parse as intended.
#define LUM_CHECK(cond) \
  switch (0)            \
  case 0:               \
  default:              \
    if (cond) {         \
    } else              \
      ::luminal::detail::ErrorThrower<::luminal::Error>{} & ::luminal::detail::ErrorMessage("")

#define LUM_STRINGIFY_INNER(x) #x
#define LUM_STRINGIFY(x) LUM_STRINGIFY_INNER(x)

#define LUM_ASSERT(cond)                                                \
  switch (0)                                                            \
  case 0:                                                               \
  default:                                                              \
    if (cond) {                                                         \
    } else                                                              \
      ::luminal::detail::ErrorThrower<::luminal::InternalError>{} &     \
          ::luminal::detail::ErrorMessage("internal error at " __FILE__ \
                                          ":" LUM_STRINGIFY(__LINE__) ": " #cond " failed: ")

/// Unconditional user error.
#define LUM_FAIL() LUM_CHECK(false)
