// Pool kernels (max_pool2d, avg_pool2d), the edge cases: known small values and argmax indices,
// ties and NaN, empty batches, f32 backward against f64 with overlapping windows bit-identical for
// any thread count (and the cuda backend's bits equal to the CPU's: both gather in one order), and
// every bad input's message. (Values and gradients against finite differences and composed
// references, on every device, are rows of tests/test_autograd_ops.cpp; cuda scheduling orders,
// of tests/test_cuda_nn_ops.cpp.)
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {
const Pool2d k3s1p1{{3, 3}, {1, 1}, {1, 1}, {1, 1}};  // overlapping: each input in up to 9 windows
}  // namespace

TEST_CASE("max_pool2d and avg_pool2d: known values, argmax indices, padding, dilation") {
  // One (1, 1, 3, 4) plane: 0 1 2 3 / 4 5 6 7 / 8 9 10 11 (value == flat index).
  std::vector<double> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  const Tensor x = from_vector<double>(v, {1, 1, 3, 4});
  const MaxPool2dForward m = max_pool2d_forward(x, {{2, 2}, {1, 2}, {0, 0}, {1, 1}});
  CHECK(m.y.shape() == (Shape{1, 1, 2, 2}));
  CHECK(values(m.y) == std::vector<double>{5, 7, 9, 11});
  CHECK(values(m.indices) == std::vector<double>{5, 7, 9, 11});
  // Padding 1 with a 3x3 window: corners see 4 inputs, -inf padding is never chosen.
  for (double& e : v) e = -e;
  const MaxPool2dForward mp =
      max_pool2d_forward(from_vector<double>(v, {1, 1, 3, 4}), {{3, 3}, {2, 2}, {1, 1}, {1, 1}});
  CHECK(values(mp.y) == std::vector<double>{0, -1, -4, -5});
  CHECK(values(mp.indices) == std::vector<double>{0, 1, 4, 5});
  // Dilation 2 along W: window columns {0, 2} and {1, 3}.
  const MaxPool2dForward md = max_pool2d_forward(x, {{1, 2}, {1, 1}, {0, 0}, {1, 2}});
  CHECK(values(md.y) == std::vector<double>{2, 3, 6, 7, 10, 11});
  // avg, padding counted: the corner window of a 3x3 / pad 1 holds 0 + 1 + 4 + 5 over 9; the
  // next one, columns 1..3 of rows 0..1.
  const Tensor a = avg_pool2d_forward(x, {{3, 3}, {2, 2}, {1, 1}, {1, 1}});
  check_close(a, std::vector<double>{10.0 / 9, 24.0 / 9, 26.0 / 9, 48.0 / 9}, 1e-15, 1e-15);
  // Backward: max routes dy to the index; avg spreads dy / 9 over the window, so dy = 9 gives
  // each input the number of windows covering it (rows 1 and column 1 are in two).
  const Tensor dx = max_pool2d_backward(ones({1, 1, 2, 2}, DType::f64), m.indices, x.shape(),
                                        {{2, 2}, {1, 2}, {0, 0}, {1, 1}});
  CHECK(values(dx) == std::vector<double>{0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1});
  const Tensor da = avg_pool2d_backward(full({1, 1, 2, 2}, 9.0, DType::f64), x.shape(),
                                        {{3, 3}, {2, 2}, {1, 1}, {1, 1}});
  CHECK(values(da) == std::vector<double>{1, 2, 1, 1, 2, 4, 2, 2, 1, 2, 1, 1});
}

TEST_CASE("max_pool2d: ties take the first maximum, NaN wins, overlapping windows add their dy") {
  const Tensor x = from_vector<float>({1, 1, 1, 1, 2, 2, 2, std::nanf(""), 0}, {1, 1, 3, 3});
  const Pool2d p{{2, 2}, {1, 1}, {0, 0}, {1, 1}};
  const MaxPool2dForward m = max_pool2d_forward(x, p);
  const std::vector<double> y = values(m.y);
  CHECK(y[0] == 2);  // window {1, 1, 1, 2}
  CHECK(y[1] == 2);  // window {1, 1, 2, 2}: the first 2 (index 4)
  CHECK(std::isnan(y[2]));
  CHECK(std::isnan(y[3]));
  CHECK(values(m.indices) == std::vector<double>{4, 4, 7, 7});
  const Tensor dx = max_pool2d_backward(from_vector<float>({1, 10, 100, 1000}, {1, 1, 2, 2}), m.indices, x.shape(), p);
  CHECK(values(dx) == std::vector<double>{0, 0, 0, 0, 11, 0, 0, 1100, 0});
  // A window of -inf values still names its first element (padding aside), as PyTorch: the
  // gradient is not lost.
  const float inf = std::numeric_limits<float>::infinity();
  const MaxPool2dForward mi =
      max_pool2d_forward(full({1, 1, 2, 2}, -inf, DType::f32), {{2, 2}, {1, 1}, {1, 1}, {1, 1}});
  CHECK(values(mi.indices) == std::vector<double>{0, 0, 1, 0, 0, 1, 2, 2, 3});
  CHECK(values(mi.y) == std::vector<double>(9, -inf));
  if (cuda_available())
    CHECK(values(max_pool2d_forward(full({1, 1, 2, 2}, -inf, DType::f32, Device::cuda(0)),
                                    {{2, 2}, {1, 1}, {1, 1}, {1, 1}})
                     .indices) == values(mi.indices));
}

TEST_CASE("pooling an empty batch gives empty outputs and zero gradients") {
  const Tensor x = zeros({0, 3, 4, 4});
  const MaxPool2dForward m = max_pool2d_forward(x, k3s1p1);
  CHECK(m.y.shape() == (Shape{0, 3, 4, 4}));
  CHECK(max_pool2d_backward(m.y, m.indices, x.shape(), k3s1p1).shape() == x.shape());
  CHECK(avg_pool2d_forward(x, k3s1p1).shape() == (Shape{0, 3, 4, 4}));
  CHECK(avg_pool2d_backward(m.y, x.shape(), k3s1p1).shape() == x.shape());
}

TEST_CASE("pool backward: f32 agrees with f64, overlapping windows bit-identical for any thread count and device") {
  const Shape shape{8, 16, 17, 13};  // P * H * W * 9 well above the CPU's parallel threshold
  const Tensor x = uniform_f64(shape, 50, -2, 2), xf = x.to(DType::f32);
  const MaxPool2dForward m64 = max_pool2d_forward(x, k3s1p1), mf = max_pool2d_forward(xf, k3s1p1);
  check_close(mf.y, values(m64.y), 1e-6, 1e-6);
  CHECK(values(mf.indices) == values(m64.indices));  // no ties in uniform draws, even in f32
  const Tensor dy = uniform_f64(m64.y.shape(), 51), dyf = dy.to(DType::f32);
  const Tensor max_ref = max_pool2d_backward(dy, m64.indices, shape, k3s1p1);
  const Tensor avg_ref = avg_pool2d_backward(dy, shape, k3s1p1);
  check_close(avg_pool2d_forward(xf, k3s1p1), values(avg_pool2d_forward(x, k3s1p1)), 1e-5, 1e-6);
  std::vector<Tensor> max_runs, avg_runs;
  for_thread_counts({1, 2, 3, 7}, [&] {
    max_runs.push_back(max_pool2d_backward(dyf, mf.indices, shape, k3s1p1));
    avg_runs.push_back(avg_pool2d_backward(dyf, shape, k3s1p1));
  });
  check_close(max_runs[0], values(max_ref), 1e-5, 1e-6);
  check_close(avg_runs[0], values(avg_ref), 1e-5, 1e-6);
  for (size_t i = 1; i < max_runs.size(); ++i) {
    CHECK(bit_identical(max_runs[i], max_runs[0]));
    CHECK(bit_identical(avg_runs[i], avg_runs[0]));
  }
  if (cuda_available()) {  // the same gather order on cuda: the CPU's bits
    const Device cuda = Device::cuda(0);
    const MaxPool2dForward mc = max_pool2d_forward(xf.to(cuda), k3s1p1);
    CHECK(bit_identical(mc.y.to(Device::cpu()), mf.y));
    CHECK(bit_identical(mc.indices.to(Device::cpu()), mf.indices));
    CHECK(bit_identical(max_pool2d_backward(dyf.to(cuda), mc.indices, shape, k3s1p1).to(Device::cpu()), max_runs[0]));
    CHECK(bit_identical(avg_pool2d_backward(dyf.to(cuda), shape, k3s1p1).to(Device::cpu()), avg_runs[0]));
  }
}

TEST_CASE("bad pool inputs raise reel::Error naming op, shapes and window") {
  const Tensor x = zeros({2, 3, 5, 5});
  CHECK_REEL_ERROR(max_pool2d_forward(zeros({3, 5, 5}), k3s1p1),
                   "max_pool2d_forward: x (3, 5, 5) must be 4-D (N, C, H, W)");
  CHECK_REEL_ERROR(avg_pool2d_forward(zeros({5}), k3s1p1), "avg_pool2d_forward: x (5) must be 4-D (N, C, H, W)");
  CHECK_REEL_ERROR(max_pool2d_forward(x, {{0, 2}, {1, 1}, {0, 0}, {1, 1}}),
                   "max_pool2d_forward: kernel_size (0, 2) must be positive");
  CHECK_REEL_ERROR(max_pool2d_forward(x, {{2, 2}, {1, -1}, {0, 0}, {1, 1}}),
                   "max_pool2d_forward: stride (1, -1) must be positive");
  CHECK_REEL_ERROR(max_pool2d_forward(x, {{2, 2}, {1, 1}, {0, 0}, {0, 1}}),
                   "max_pool2d_forward: dilation (0, 1) must be positive");
  CHECK_REEL_ERROR(max_pool2d_forward(x, {{3, 2}, {1, 1}, {1, 2}, {1, 1}}),
                   "max_pool2d_forward: padding (1, 2) must be in [0, kernel_size / 2] for kernel_size (3, 2)");
  CHECK_REEL_ERROR(avg_pool2d_forward(x, {{2, 2}, {1, 1}, {-1, 0}, {1, 1}}),
                   "avg_pool2d_forward: padding (-1, 0) must be in [0, kernel_size / 2]");
  CHECK_REEL_ERROR(max_pool2d_forward(x, {{6, 2}, {1, 1}, {0, 0}, {1, 1}}),
                   "max_pool2d_forward: kernel_size (6, 2) with dilation (1, 1) is larger than x (2, 3, 5, 5) "
                   "padded by (0, 0)");
  CHECK_REEL_ERROR(max_pool2d_forward(x, {{2, 2}, {1, 1}, {0, 0}, {5, 1}}),
                   "max_pool2d_forward: kernel_size (2, 2) with dilation (5, 1) is larger than x");
  CHECK_REEL_ERROR(avg_pool2d_forward(x, {{2, 2}, {1, 1}, {0, 0}, {2, 2}}),
                   "avg_pool2d_forward: dilation (2, 2) is not supported");
  CHECK_REEL_ERROR(max_pool2d_forward(zeros({2, 3, 5, 5}, DType::i64), k3s1p1), "max_pool2d_forward");
  const MaxPool2dForward m = max_pool2d_forward(x, k3s1p1);
  CHECK_REEL_ERROR(max_pool2d_backward(zeros({2, 3, 4, 5}), m.indices, x.shape(), k3s1p1),
                   "max_pool2d_backward: dy (2, 3, 4, 5) does not match the output (2, 3, 5, 5) of x (2, 3, 5, 5)");
  CHECK_REEL_ERROR(max_pool2d_backward(m.y, m.indices.to(DType::i32), x.shape(), k3s1p1),
                   "max_pool2d_backward: indices (2, 3, 5, 5) i32 must be i64 shaped like dy (2, 3, 5, 5)");
  CHECK_REEL_ERROR(avg_pool2d_backward(zeros({2, 3, 5}), x.shape(), k3s1p1),
                   "avg_pool2d_backward: dy (2, 3, 5) does not match the output (2, 3, 5, 5)");
  CHECK_REEL_ERROR(avg_pool2d_backward(m.y, {2, 3, 5}, k3s1p1), "avg_pool2d_backward: x (2, 3, 5) must be 4-D");
  if (cuda_available())
    CHECK_REEL_ERROR(max_pool2d_backward(m.y.to(Device::cuda(0)), m.indices, x.shape(), k3s1p1),
                     "max_pool2d_backward: expected all tensors on one device");
}
