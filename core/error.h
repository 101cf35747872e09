// reel::Error and the check macro every layer uses to reject bad input.
// A message names the op, then the shapes, dtypes and devices involved, e.g.
//   matmul: shapes (4, 3) and (5, 2) are not compatible: inner dims 3 != 5
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace reel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

using Shape = std::vector<int64_t>;

// "(4, 3)"; a scalar (rank 0) prints as "()".
std::string shape_str(const Shape& shape);

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void stream_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  if constexpr (std::is_same_v<T, Shape>) os << shape_str(first);
  else os << first;
  stream_all(os, rest...);
}
template <typename... Parts>
[[noreturn]] void throw_error(const Parts&... parts) {
  std::ostringstream os;
  stream_all(os, parts...);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace reel

// REEL_CHECK(cond, "op: ", a.shape(), " and ", b.shape(), " ...") throws reel::Error when cond is
// false. Shapes (std::vector<int64_t>) print as "(4, 3)"; anything with operator<< prints as is.
#define REEL_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) ::reel::detail::throw_error(__VA_ARGS__);      \
  } while (0)

#define REEL_FAIL(...) ::reel::detail::throw_error(__VA_ARGS__)
