// Pool kernels (max_pool2d, avg_pool2d), the edge cases: known small values and argmax indices,
// ceil_mode (PyTorch's output size, dropped last window, clipped divisor), count_include_pad=false,
// unbatched (C, H, W) input, ties and NaN, empty batches, f32 backward against f64 with overlapping windows bit-identical for
// any thread count (and the cuda backend's bits equal to the CPU's: both gather in one order), and
// every bad input's message. (Values and gradients against finite differences and composed
// references, on every device, are rows of tests/op_table/pool.cpp; cuda scheduling orders,
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
    // avg pooling on cuda goes through cuDNN (kernels/cuda/pool.cu), another implementation: close,
    // not the same bits (its run-to-run determinism is tests/test_cuda_nn_ops.cpp's).
    check_close(avg_pool2d_backward(dyf.to(cuda), shape, k3s1p1), values(avg_runs[0]), 1e-6, 1e-6);
  }
}

TEST_CASE("bad pool inputs raise reel::Error naming op, shapes and window") {
  const Tensor x = zeros({2, 3, 5, 5});
  CHECK_REEL_ERROR(max_pool2d_forward(zeros({1, 2, 3, 5, 5}), k3s1p1),
                   "max_pool2d_forward: x (1, 2, 3, 5, 5) must be 4-D (N, C, H, W) or 3-D (C, H, W)");
  CHECK_REEL_ERROR(avg_pool2d_forward(zeros({5, 5}), k3s1p1),
                   "avg_pool2d_forward: x (5, 5) must be 4-D (N, C, H, W) or 3-D (C, H, W)");
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
  CHECK_REEL_ERROR(avg_pool2d_backward(m.y, {3, 5}, k3s1p1), "avg_pool2d_backward: x (3, 5) must be 4-D");
  CHECK_REEL_ERROR(avg_pool2d_backward(m.y, {3, 5, 5}, k3s1p1),
                   "avg_pool2d_backward: dy (2, 3, 5, 5) does not match the output (3, 5, 5) of x (3, 5, 5)");
  // ceil_mode: the kernel still may not exceed what rounding up reaches; the message says so.
  Pool2d big{{4, 4}, {1, 1}, {1, 1}, {1, 1}, true};
  CHECK_REEL_ERROR(max_pool2d_forward(zeros({1, 1, 1, 1}), big),
                   "max_pool2d_forward: kernel_size (4, 4) with dilation (1, 1) is larger than x (1, 1, 1, 1) padded "
                   "by (1, 1) (ceil_mode)");
  // ... which a stride as large as the window allows, as PyTorch (one window, one input element).
  big.stride = {4, 4};
  const MaxPool2dForward one = max_pool2d_forward(full({1, 1, 1, 1}, 3.0, DType::f64), big);
  CHECK(values(one.y) == std::vector<double>{3});
    // The window (rows and columns -1..2) clipped to the padded input (-1..1): 3 over 3 * 3.
  check_close(avg_pool2d_forward(full({1, 1, 1, 1}, 3.0, DType::f64), big), std::vector<double>{1.0 / 3}, 1e-15,
              1e-15);
  // A 3-D x with a 4-D dy, or the reverse.
  CHECK_REEL_ERROR(max_pool2d_backward(m.y, m.indices, {3, 5, 5}, k3s1p1),
                   "max_pool2d_backward: dy (2, 3, 5, 5) does not match the output (3, 5, 5)");
  if (cuda_available())
    CHECK_REEL_ERROR(max_pool2d_backward(m.y.to(Device::cuda(0)), m.indices, x.shape(), k3s1p1),
                     "max_pool2d_backward: expected all tensors on one device");
}

TEST_CASE("ceil_mode: PyTorch's output size, the last window dropped when it starts in the right padding") {
  // (H, kernel, stride, padding) -> OH without and with ceil_mode.
  struct Case {
    int64_t h, k, s, pad, floor_out, ceil_out;
  };
  for (const Case c : {Case{3, 2, 2, 0, 1, 2}, Case{5, 2, 2, 0, 2, 3}, Case{6, 3, 2, 1, 3, 4},
                       Case{5, 2, 2, 1, 3, 3},    // ceil gives 4, whose window would start at 6 >= 5 + 1
                       Case{4, 2, 3, 1, 2, 2},    // likewise: 3 dropped to 2
                       Case{7, 3, 3, 1, 3, 3}}) {  // exact: no rounding
    CAPTURE(c.h);
    CAPTURE(c.s);
    CAPTURE(c.pad);
    Pool2d p{{c.k, 1}, {c.s, 1}, {c.pad, 0}, {1, 1}};
    CHECK(max_pool2d_forward(zeros({1, 1, c.h, 2}), p).y.size(2) == c.floor_out);
    p.ceil_mode = true;
    CHECK(max_pool2d_forward(zeros({1, 1, c.h, 2}), p).y.size(2) == c.ceil_out);
    CHECK(avg_pool2d_forward(zeros({1, 1, c.h, 2}), p).size(2) == c.ceil_out);
  }
}

TEST_CASE("ceil_mode and count_include_pad: known values, divisors clipped at the padded edge") {
  // One (1, 1, 3, 4) plane: 0 1 2 3 / 4 5 6 7 / 8 9 10 11.
  std::vector<double> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  for (const Device d : devices()) {
    CAPTURE(d);
    const Tensor x = from_vector<double>(v, {1, 1, 3, 4}).to(d);
    // 2x2 stride 2, ceil_mode: (2, 2) windows, the second row of them holds row 2 alone (its
    // padding-free window ends at H: divisor 2, with or without count_include_pad).
    const Pool2d p2{{2, 2}, {2, 2}, {0, 0}, {1, 1}, true};
    const MaxPool2dForward m = max_pool2d_forward(x, p2);
    CHECK(values(m.y) == std::vector<double>{5, 7, 9, 11});
    CHECK(values(m.indices) == std::vector<double>{5, 7, 9, 11});
    check_close(avg_pool2d_forward(x, p2), std::vector<double>{2.5, 4.5, 8.5, 10.5}, 1e-15, 1e-15);
    check_close(avg_pool2d_backward(ones({1, 1, 2, 2}, DType::f64, d), x.shape(), p2),
                std::vector<double>{0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.5, 0.5, 0.5, 0.5}, 1e-15,
                1e-15);
    // 3x3 stride 2 padding 1, ceil_mode: (2, 3) (floor: (2, 2)); the last column of windows,
    // columns 3..5, holds column 3, padding column 4 and column 5 past the padded edge: divisor 3 * 2
    // with the padding counted, 2 * 1 (rows 0..1 or 1..2, column 3) without.
    Pool2d p3{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true};
    const MaxPool2dForward m3 = max_pool2d_forward(x, p3);
    CHECK(values(m3.y) == std::vector<double>{5, 7, 7, 9, 11, 11});
    CHECK(values(m3.indices) == std::vector<double>{5, 7, 7, 9, 11, 11});
    // Window sums: 10 24 10 / 26 48 18.
    check_close(avg_pool2d_forward(x, p3), std::vector<double>{10.0 / 9, 24.0 / 9, 10.0 / 6, 26.0 / 9, 48.0 / 9, 3},
                1e-15, 1e-15);
    p3.count_include_pad = false;
    check_close(avg_pool2d_forward(x, p3), std::vector<double>{2.5, 4, 5, 6.5, 8, 9}, 1e-15, 1e-15);
    // Backward without count_include_pad: dy = 12 gives each input the sum of 12 / divisor over
    // the windows covering it (divisors 4 6 2 / 4 6 2; rows: 0 in the first row of windows, 1 in
    // both, 2 in the second; columns: 0 in window 0, 1 in 0 and 1, 2 in 1, 3 in 1 and 2).
    check_close(avg_pool2d_backward(full({1, 1, 2, 3}, 12.0, DType::f64, d), x.shape(), p3),
                std::vector<double>{3, 5, 2, 8, 6, 10, 4, 16, 3, 5, 2, 8}, 1e-14, 1e-14);
    // Without ceil_mode, count_include_pad=false: 3x3 stride 1 padding 1 corners hold 4 inputs.
    const Pool2d pe{{3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false};
    const std::vector<double> a = values(avg_pool2d_forward(x, pe));
    CHECK(a[0] == doctest::Approx((0 + 1 + 4 + 5) / 4.0));
    CHECK(a[5] == doctest::Approx((0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10) / 9.0));
    CHECK(a[1] == doctest::Approx((0 + 1 + 2 + 4 + 5 + 6) / 6.0));
  }
}

TEST_CASE("unbatched (C, H, W) input pools like a batch of one, gradients shaped like x") {
  const Tensor x4 = uniform_f64({1, 3, 7, 6}, 60, -2, 2), x3 = x4.reshape({3, 7, 6});
  for (const Pool2d& p : {k3s1p1, Pool2d{{3, 2}, {2, 2}, {1, 1}, {1, 1}, true}, Pool2d{{2, 2}, {2, 1}, {1, 0}, {1, 1}, true, false}}) {
    const MaxPool2dForward m4 = max_pool2d_forward(x4, p), m3 = max_pool2d_forward(x3, p);
    CHECK(m3.y.shape() == (Shape{3, m4.y.size(2), m4.y.size(3)}));
    CHECK(values(m3.y) == values(m4.y));
    CHECK(values(m3.indices) == values(m4.indices));
    const Tensor dy3 = uniform_f64(m3.y.shape(), 61);
    const Tensor dx3 = max_pool2d_backward(dy3, m3.indices, x3.shape(), p);
    CHECK(dx3.shape() == x3.shape());
    CHECK(values(dx3) == values(max_pool2d_backward(dy3.reshape(m4.y.shape()), m4.indices, x4.shape(), p)));
    const Tensor a3 = avg_pool2d_forward(x3, p);
    CHECK(a3.shape() == m3.y.shape());
    CHECK(values(a3) == values(avg_pool2d_forward(x4, p)));
    const Tensor da3 = avg_pool2d_backward(dy3, x3.shape(), p);
    CHECK(da3.shape() == x3.shape());
    CHECK(values(da3) == values(avg_pool2d_backward(dy3.reshape(m4.y.shape()), x4.shape(), p)));
  }
}

TEST_CASE("ceil_mode, count_include_pad=false and unbatched input on cuda agree with the CPU in f32") {
  if (!cuda_available()) return;
  const Device cuda = Device::cuda(0);
  // Windows that hang past the padded edge (reel's kernels on cuda), windows that do not
  // (cuDNN for avg), either divisor, batched and not.
  const Pool2d cases[] = {{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},        {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
                          {{3, 2}, {1, 2}, {1, 1}, {1, 1}, false, false}, {{2, 2}, {2, 2}, {1, 1}, {1, 1}, true},
                          {{2, 3}, {3, 2}, {0, 1}, {1, 1}, true, false}};
  for (const Shape& shape : {Shape{2, 3, 9, 8}, Shape{3, 8, 7}}) {
    const Tensor x = uniform_f64(shape, 70, -2, 2).to(DType::f32), xc = x.to(cuda);
    for (const Pool2d& p : cases) {
      CAPTURE(p.count_include_pad);
      CAPTURE(p.kernel[1]);
      const MaxPool2dForward m = max_pool2d_forward(x, p), mc = max_pool2d_forward(xc, p);
      CHECK(bit_identical(mc.y.to(Device::cpu()), m.y));  // reel's kernels on both: the same bits
      CHECK(bit_identical(mc.indices.to(Device::cpu()), m.indices));
      const Tensor dy = uniform_f64(m.y.shape(), 71).to(DType::f32);
      CHECK(bit_identical(max_pool2d_backward(dy.to(cuda), mc.indices, shape, p).to(Device::cpu()),
                          max_pool2d_backward(dy, m.indices, shape, p)));
      check_close(avg_pool2d_forward(xc, p), values(avg_pool2d_forward(x, p)), 1e-6, 1e-6);
      check_close(avg_pool2d_backward(dy.to(cuda), shape, p), values(avg_pool2d_backward(dy, shape, p)), 1e-6, 1e-6);
    }
  }
}
