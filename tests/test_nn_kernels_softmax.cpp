// Softmax / log-softmax along the last dim and max-with-argmax along any axis: values against
// f64 reference loops (awkward shapes, huge logits), backward against finite differences in f64,
// NaN and tie rules of the argmax, bad inputs.
#include <cmath>
#include <limits>

#include "kernels/nn_ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

std::vector<double> softmax_ref(const std::vector<double>& x, int64_t C, bool log) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    const double* xr = &x[r * C];
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, xr[c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = log ? xr[c] - m - std::log(s) : std::exp(xr[c] - m) / s;
  }
  return y;
}

}  // namespace

TEST_CASE("softmax and log_softmax forward match the f64 reference") {
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {1, 7}, {3, 257}, {2, 3, 7}, {64, 768}, {5}})
    for (DType dt : {DType::f64, DType::f32}) {
      CAPTURE(shape_str(shape));
      CAPTURE(dtype_name(dt));
      Tensor x = uniform_f64(shape, 1, -5, 5).to(dt);
      const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
      check_close(softmax_forward(x), softmax_ref(values(x), shape.back(), false), tol, tol);
      check_close(log_softmax_forward(x), softmax_ref(values(x), shape.back(), true), tol, tol);
    }
}

TEST_CASE("softmax of huge logits stays finite") {
  Tensor x = from_vector<float>({1e4f, -1e4f, 9999.f, 3e4f, 3e4f, -3e4f}, {2, 3});
  const std::vector<double> y = values(softmax_forward(x)), ly = values(log_softmax_forward(x));
  for (double v : y) CHECK(std::isfinite(v));
  for (double v : ly) CHECK(std::isfinite(v));
  check_close(softmax_forward(x), softmax_ref(values(x), 3, false), 1e-6, 1e-7);
  check_close(log_softmax_forward(x), softmax_ref(values(x), 3, true), 1e-6, 1e-3);
}

TEST_CASE("masked (-inf) entries: softmax exactly 0, log_softmax -inf, no gradient, in rows of any width") {
  // Widths below, at and above a SIMD packet, and with a scalar tail: the vectorised exp must give
  // exactly 0 for exp(-inf), as the scalar tail does (Eigen's packet exp gave 5.6e-309 in f64).
  for (int64_t C : {3, 8, 16, 33, 257})
    for (DType dt : {DType::f64, DType::f32}) {
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
      const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
      check_close(y, softmax_ref(xv, C, false), tol, tol);
    }
}

TEST_CASE("softmax backward from the saved output matches finite differences in f64") {
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {3, 5}, {2, 257}, {2, 2, 7}}) {
    CAPTURE(shape_str(shape));
    Tensor x = uniform_f64(shape, 2, -3, 3), wy = uniform_f64(shape, 3);
    check_gradient("softmax dx", x, softmax_backward(wy, softmax_forward(x)),
                   [&] { return weighted_sum(softmax_forward(x), wy); });
    check_gradient("log_softmax dx", x, log_softmax_backward(wy, log_softmax_forward(x)),
                   [&] { return weighted_sum(log_softmax_forward(x), wy); });
  }
}

TEST_CASE("max_with_indices along every axis matches a reference, with keepdim") {
  const Shape shape{3, 4, 5};
  Tensor x = uniform_f64(shape, 4);
  const std::vector<double> xv = values(x);
  for (int64_t axis = 0; axis < 3; ++axis)
    for (bool keepdim : {false, true}) {
      CAPTURE(axis);
      MaxWithIndices m = max_with_indices(x.to(DType::f32), axis - 3, keepdim);  // negative axis
      Shape expected_shape = shape;
      if (keepdim) expected_shape[axis] = 1;
      else expected_shape.erase(expected_shape.begin() + axis);
      CHECK(m.values.shape() == expected_shape);
      CHECK(m.indices.dtype() == DType::i64);
      std::vector<double> ref_v;
      std::vector<int64_t> ref_i;
      const int64_t O = axis == 0 ? 1 : (axis == 1 ? 3 : 12), A = shape[axis], I = axis == 0 ? 20 : (axis == 1 ? 5 : 1);
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < I; ++i) {
          double best = -INFINITY;
          int64_t bi = -1;
          for (int64_t a = 0; a < A; ++a)
            if (xv[(o * A + a) * I + i] > best) best = xv[(o * A + a) * I + i], bi = a;
          ref_v.push_back(best);
          ref_i.push_back(bi);
        }
      check_close(m.values, ref_v, 1e-6, 1e-6);
      CHECK(m.indices.contiguous().to_vector<int64_t>() == ref_i);
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

TEST_CASE("max_backward scatters dy to the argmax and matches finite differences") {
  for (int64_t axis : {0, 1, 2}) {
    CAPTURE(axis);
    Tensor x = uniform_f64({2, 3, 4}, 5 + axis);  // distinct values: no ties within h
    for (bool keepdim : {false, true}) {
      MaxWithIndices m = max_with_indices(x, axis, keepdim);
      Tensor wy = uniform_f64(m.values.shape(), 9);
      Tensor dx = max_backward(wy, m.indices, x.shape(), axis);
      check_gradient("max dx", x, dx, [&] { return weighted_sum(max_with_indices(x, axis, keepdim).values, wy); });
    }
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
