// Softmax / log-softmax along the last dim and max-with-argmax along any axis, the edge cases:
// masked (-inf) entries give exact zeros, NaN and tie rules of the argmax on short and long rows,
// bad inputs. (Values against f64 reference loops, huge and masked logits included, and every
// backward against finite differences, on every device, are rows of tests/op_table/softmax.cpp.)
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

TEST_CASE("masked (-inf) entries: softmax exactly 0, log_softmax -inf, no gradient, in rows of any width") {
  // Widths below, at and above a SIMD packet, and with a scalar tail: the vectorised exp must give
  // exactly 0 for exp(-inf), as the scalar tail does (Eigen's packet exp gave 5.6e-309 in f64).
  for (int64_t C : {3, 8, 16, 33, 257})
    for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      const std::string dtype = dtype_name(dt);  // CAPTURE of a const char* prints the pointer
      CAPTURE(C);
      CAPTURE(dtype);
      std::vector<double> xv = values(uniform_f64({2, C}, 7, -5, 5));
      std::vector<bool> masked(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) masked[i] = i % 3 == 1 || (i >= size_t(C) && i % size_t(C) > 1);
      for (size_t i = 0; i < xv.size(); ++i)
        if (masked[i]) xv[i] = -INFINITY;
      Tensor x = from_vector<double>(xv, {2, C}).to(dt), dy = uniform_f64({2, C}, 8).to(dt);
      Tensor y = softmax_forward(x), ly = log_softmax_forward(x);
      const std::vector<double> yv = values(y), lyv = values(ly), dyv = values(dy);
      const std::vector<double> dx = values(softmax_backward(dy, y)), ldx = values(log_softmax_backward(dy, ly));
      int wrong = 0;
      for (size_t i = 0; i < xv.size(); ++i)
        if (masked[i]) wrong += yv[i] != 0.0 || lyv[i] != -INFINITY || dx[i] != 0.0 || ldx[i] != dyv[i];
      CHECK(wrong == 0);
    }
}

TEST_CASE("max_with_indices: first of ties, first NaN wins") {
  Tensor x = from_vector<double>({1, 3, 3, 2, -1, 5, NAN, 0, NAN, -INFINITY}, {2, 5});
  MaxWithIndices m = max_with_indices(x, 1);
  CHECK(m.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(values(m.values)[0] == 3);
  CHECK(std::isnan(values(m.values)[1]));
  MaxWithIndices c = max_with_indices(x, 0);  // columns: (1, 5) (3, NaN) (3, 0) (2, NaN) (-1, -inf)
  CHECK(c.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 1, 0});
}

TEST_CASE("max_with_indices on long rows: ties and NaN past the first blocks") {
  std::vector<double> v(3 * 200);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));  // in [-1, 1]
  v[150] = v[170] = 2;      // row 0: a tie, the first wins
  v[200 + 199] = 3;         // row 1: the last element
  v[400 + 190] = NAN;       // row 2: NaN beats the 5 that comes after it
  v[400 + 195] = 5;
  v.resize(4 * 200, -INFINITY);  // row 3: all -inf, the first wins
  for (DType dt : {DType::f32, DType::f64}) {
    MaxWithIndices m = max_with_indices(from_vector<double>(v, {4, 200}).to(dt), -1);
    CHECK(m.indices.to_vector<int64_t>() == std::vector<int64_t>{150, 199, 190, 0});
    CHECK(values(m.values)[3] == -INFINITY);
  }
}

TEST_CASE("bad softmax / max inputs raise reel::Error") {
  CHECK_REEL_ERROR(softmax_forward(zeros({2, 3}, DType::i64)), "softmax_forward: dtype i64");
  CHECK_REEL_ERROR(softmax_forward(scalar_tensor(1.0)), "softmax_forward: x () needs at least one dim");
  CHECK_REEL_ERROR(log_softmax_backward(zeros({2, 3}), zeros({3, 2})),
                   "log_softmax_backward: dy (2, 3) and y (3, 2) must have one shape");
  CHECK_REEL_ERROR(max_with_indices(zeros({2, 0}), 1),
                   "max_with_indices: cannot take the max over the empty axis 1 of shape (2, 0)");
  CHECK_REEL_ERROR(max_with_indices(zeros({2, 3}), 2), "max_with_indices: dim 2 is out of range");
  MaxWithIndices m = max_with_indices(zeros({2, 3}), 1);
  CHECK_REEL_ERROR(max_backward(zeros({3}), m.indices, {2, 3}, 1),
                   "max_backward: dy (3) and indices (2) do not match input (2, 3) reduced along axis 1: "
                   "(2) or (2, 1) expected");
  CHECK_REEL_ERROR(max_backward(zeros({2}), from_vector<int64_t>({0, 3}, {2}), {2, 3}, 1),
                   "max_backward: index 3 at position (1) of (2) is out of range [0, 3)");
  CHECK_REEL_ERROR(max_backward(zeros({2}), from_vector<int32_t>({0, 1}, {2}), {2, 3}, 1),
                   "max_backward: indices (2) have dtype i32; i64 expected");
}
