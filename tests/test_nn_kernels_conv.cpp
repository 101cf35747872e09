// Conv kernels (conv2d forward, backward input, weight and bias), the edge cases: known small
// values (padding, stride, groups), empty batches, f32 against f64 on a larger grouped, strided
// case, bit-identical results for any thread count (and run to run on cuda: deterministic cuDNN
// algorithms), cuda against cpu, and every bad input's message. (Values and gradients against
// finite differences and a composed reference, on every device, are rows of
// tests/op_table/conv.cpp; the emulated cuDNN's API contract is tests/test_cudnn_emu.cpp.)
#include "autograd/functions.h"  // slice
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {
// x = 0 .. 8 as one (1, 1, 3, 3) plane, w = 1 2 / 3 4.
Tensor plane3x3() {
  std::vector<double> v(9);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return from_vector<double>(v, {1, 1, 3, 3});
}
const Tensor& w2x2() {
  static const Tensor w = from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2});
  return w;
}
}  // namespace

TEST_CASE("conv2d: known values, padding, stride, groups, and the three backward products") {
  for (const Device dev : devices()) {
    CAPTURE(dev);
    const Tensor x = plane3x3().to(dev), w = w2x2().to(dev);
    // No padding: each output is its 2x2 window times w, plus the bias 0.5.
    const Tensor y = conv2d_forward(x, w, full({1}, 0.5, DType::f64, dev), {});
    CHECK(y.shape() == (Shape{1, 1, 2, 2}));
    CHECK(values(y) == std::vector<double>{27.5, 37.5, 57.5, 67.5});
    // Padding 1, stride 2: the corner window holds x[0, 0] * w[1, 1] and zeros.
    const Conv2d s2p1{{2, 2}, {1, 1}, {1, 1}, 1};
    CHECK(values(conv2d_forward(x, w, Tensor(), s2p1)) == std::vector<double>{0, 11, 30, 67});
    // dy = ones: dx counts the weights whose tap covers each input, dw sums each tap's inputs.
    const Tensor dy = ones({1, 1, 2, 2}, DType::f64, dev);
    CHECK(values(conv2d_backward_input(dy, w, x.shape(), {})) == std::vector<double>{1, 3, 2, 4, 10, 6, 3, 7, 4});
    CHECK(values(conv2d_backward_weight(dy, x, w.shape(), {})) == std::vector<double>{8, 12, 20, 24});
    CHECK(values(conv2d_backward_bias(dy)) == std::vector<double>{4});
    // Two groups of one channel: each output channel sees only its own input channel.
    const Tensor xg = from_vector<double>({2, 3}, {1, 2, 1, 1}).to(dev);
    const Tensor wg = from_vector<double>({10, 100}, {2, 1, 1, 1}).to(dev);
    CHECK(values(conv2d_forward(xg, wg, Tensor(), {{1, 1}, {0, 0}, {1, 1}, 2})) == std::vector<double>{20, 300});
    // Dilation 2 on the 3x3 plane: one output, the four corners.
    CHECK(values(conv2d_forward(x, w, Tensor(), {{1, 1}, {0, 0}, {2, 2}, 1})) ==
          std::vector<double>{0 * 1 + 2 * 2 + 6 * 3 + 8 * 4});
  }
}

TEST_CASE("conv2d of an empty batch: empty outputs, zero weight and bias gradients") {
  for (const Device dev : devices()) {
    CAPTURE(dev);
    const Tensor x = zeros({0, 3, 5, 5}, DType::f32, dev), w = ones({4, 3, 3, 3}, DType::f32, dev);
    const Conv2d p{{1, 1}, {1, 1}, {1, 1}, 1};
    const Tensor y = conv2d_forward(x, w, ones({4}, DType::f32, dev), p);
    CHECK(y.shape() == (Shape{0, 4, 5, 5}));
    CHECK(conv2d_backward_input(y, w, x.shape(), p).shape() == x.shape());
    CHECK(values(conv2d_backward_weight(y, x, w.shape(), p)) == std::vector<double>(4 * 3 * 3 * 3, 0.0));
    CHECK(values(conv2d_backward_bias(y)) == std::vector<double>(4, 0.0));
  }
}

TEST_CASE("conv2d: f32 agrees with f64, bit-identical for any thread count, cuda agrees with cpu") {
  Poisoned poisoned;  // an output element a kernel leaves unwritten shows up as NaN
  // Grouped, strided, padded, dilated along W; N * O * K * L well above the parallel threshold, and
  // N > 16 so the weight backward sums several samples per chunk.
  const Conv2d p{{1, 2}, {1, 2}, {1, 2}, 2};
  const Tensor x = uniform_f64({20, 6, 11, 13}, 60), w = uniform_f64({8, 3, 3, 3}, 61), b = uniform_f64({8}, 62);
  const Tensor y64 = conv2d_forward(x, w, b, p);
  const Tensor dy = uniform_f64(y64.shape(), 63);
  const Tensor dx64 = conv2d_backward_input(dy, w, x.shape(), p), dw64 = conv2d_backward_weight(dy, x, w.shape(), p);
  const Tensor db64 = conv2d_backward_bias(dy);
  const Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), bf = b.to(DType::f32), dyf = dy.to(DType::f32);
  std::vector<Tensor> ys, dxs, dws, dbs;
  for_thread_counts({1, 2, 3, 7}, [&] {
    ys.push_back(conv2d_forward(xf, wf, bf, p));
    dxs.push_back(conv2d_backward_input(dyf, wf, x.shape(), p));
    dws.push_back(conv2d_backward_weight(dyf, xf, w.shape(), p));
    dbs.push_back(conv2d_backward_bias(dyf));
  });
  check_close(ys[0], values(y64), 1e-5, 1e-5);
  check_close(dxs[0], values(dx64), 1e-5, 1e-5);
  check_close(dws[0], values(dw64), 1e-4, 1e-5);  // each a sum of 20 * 11 * 7 products
  check_close(dbs[0], values(db64), 1e-4, 1e-5);
  for (size_t i = 1; i < ys.size(); ++i) {
    CHECK(bit_identical(ys[i], ys[0]));
    CHECK(bit_identical(dxs[i], dxs[0]));
    CHECK(bit_identical(dws[i], dws[0]));
    CHECK(bit_identical(dbs[i], dbs[0]));
  }
  if (cuda_available()) {
    const Device cuda = Device::cuda(0);
    const Tensor xc = xf.to(cuda), wc = wf.to(cuda), dyc = dyf.to(cuda);
    const Tensor yc = conv2d_forward(xc, wc, bf.to(cuda), p);
    const Tensor dxc = conv2d_backward_input(dyc, wc, x.shape(), p);
    const Tensor dwc = conv2d_backward_weight(dyc, xc, w.shape(), p);
    check_close(yc, values(y64), 1e-5, 1e-5);
    check_close(dxc, values(dx64), 1e-5, 1e-5);
    check_close(dwc, values(dw64), 1e-4, 1e-5);
    check_close(conv2d_backward_bias(dyc), values(db64), 1e-4, 1e-5);
    // Deterministic algorithms only: the same bits on a second run.
    CHECK(bit_identical(conv2d_forward(xc, wc, bf.to(cuda), p), yc));
    CHECK(bit_identical(conv2d_backward_input(dyc, wc, x.shape(), p), dxc));
    CHECK(bit_identical(conv2d_backward_weight(dyc, xc, w.shape(), p), dwc));
  }
}

TEST_CASE("conv2d: a 1x1 kernel (x read in place as the col matrix) matches a padded 1x1 one cropped") {
  // 1x1 with padding 1 goes through im2col; without padding it reads x itself. The interior of the
  // padded result is the unpadded one.
  const Tensor x = uniform_f64({3, 4, 5, 6}, 70), w = uniform_f64({5, 4, 1, 1}, 71);
  const Tensor direct = conv2d_forward(x, w, Tensor(), {});
  const Tensor padded = conv2d_forward(x, w, Tensor(), {{1, 1}, {1, 1}, {1, 1}, 1});
  check_close(direct, values(slice(slice(padded, 2, 1, 6), 3, 1, 7)), 1e-14, 1e-14);
  const Tensor dy = uniform_f64(direct.shape(), 72);
  const Tensor dx = conv2d_backward_input(dy, w, x.shape(), {});
  const Tensor dw = conv2d_backward_weight(dy, x, w.shape(), {});
  // The same gradients from the padded convolution with dy zero on the padded border.
  Tensor dyp = zeros(padded.shape(), DType::f64);
  slice(slice(dyp, 2, 1, 6), 3, 1, 7).copy_(dy);
  const Conv2d p1{{1, 1}, {1, 1}, {1, 1}, 1};
  check_close(dx, values(conv2d_backward_input(dyp, w, x.shape(), p1)), 1e-14, 1e-14);
  check_close(dw, values(conv2d_backward_weight(dyp, x, w.shape(), p1)), 1e-13, 1e-13);
}

TEST_CASE("bad conv2d inputs raise reel::Error naming op, shapes and parameters") {
  const Tensor x = zeros({2, 4, 5, 5}), w = zeros({6, 2, 3, 3});
  const Conv2d g2{{1, 1}, {0, 0}, {1, 1}, 2};
  CHECK_REEL_ERROR(conv2d_forward(zeros({4, 5, 5}), w, Tensor(), g2),
                   "conv2d_forward: x (4, 5, 5) must be 4-D (N, C_in, H, W)");
  CHECK_REEL_ERROR(conv2d_forward(x, zeros({6, 2, 3}), Tensor(), g2),
                   "conv2d_forward: weight (6, 2, 3) must be 4-D (C_out, C_in / groups, kH, kW)");
  // Channel mismatch: 4 input channels in 2 groups want weight (C_out, 2, kH, kW).
  CHECK_REEL_ERROR(conv2d_forward(x, zeros({6, 3, 3, 3}), Tensor(), g2),
                   "conv2d_forward: weight (6, 3, 3, 3) does not match the 4 input channels of x (2, 4, 5, 5) in 2 "
                   "groups: (C_out > 0, 2, kH, kW) expected");
  CHECK_REEL_ERROR(conv2d_forward(x, zeros({6, 3, 3, 3}), Tensor(), {}),
                   "conv2d_forward: weight (6, 3, 3, 3) does not match the 4 input channels of x (2, 4, 5, 5) in 1 "
                   "groups");
  // Groups not dividing the channels: 3 groups of 4 inputs, or of 4 outputs.
  CHECK_REEL_ERROR(conv2d_forward(x, zeros({6, 1, 3, 3}), Tensor(), {{1, 1}, {0, 0}, {1, 1}, 3}),
                   "conv2d_forward: groups 3 must divide the input channels of x (2, 4, 5, 5) and the output channels "
                   "of weight (6, 1, 3, 3)");
  CHECK_REEL_ERROR(conv2d_forward(x, zeros({5, 2, 3, 3}), Tensor(), g2),
                   "conv2d_forward: groups 2 must divide the input channels of x (2, 4, 5, 5) and the output channels "
                   "of weight (5, 2, 3, 3)");
  CHECK_REEL_ERROR(conv2d_forward(x, w, Tensor(), {{1, 1}, {0, 0}, {1, 1}, 0}),
                   "conv2d_forward: groups 0 must be positive");
  // A kernel larger than the padded input.
  CHECK_REEL_ERROR(conv2d_forward(x, zeros({6, 2, 8, 3}), Tensor(), {{1, 1}, {1, 1}, {1, 1}, 2}),
                   "conv2d_forward: kernel (8, 3) with dilation (1, 1) is larger than x (2, 4, 5, 5) padded by (1, 1)");
  CHECK_REEL_ERROR(conv2d_forward(x, w, Tensor(), {{1, 1}, {0, 0}, {1, 3}, 2}),
                   "conv2d_forward: kernel (3, 3) with dilation (1, 3) is larger than x (2, 4, 5, 5) padded by (0, 0)");
  CHECK_REEL_ERROR(conv2d_forward(x, w, Tensor(), {{0, 1}, {0, 0}, {1, 1}, 2}),
                   "conv2d_forward: stride (0, 1) must be positive");
  CHECK_REEL_ERROR(conv2d_forward(x, w, Tensor(), {{1, 1}, {0, -1}, {1, 1}, 2}),
                   "conv2d_forward: padding (0, -1) must not be negative");
  CHECK_REEL_ERROR(conv2d_forward(x, w, Tensor(), {{1, 1}, {0, 0}, {1, 0}, 2}),
                   "conv2d_forward: dilation (1, 0) must be positive");
  CHECK_REEL_ERROR(conv2d_forward(x, w, zeros({4}), g2),
                   "conv2d_forward: bias (4) does not match the output channels of weight (6, 2, 3, 3): (6) expected");
  CHECK_REEL_ERROR(conv2d_forward(x, w.to(DType::f64), Tensor(), g2), "conv2d_forward");
  CHECK_REEL_ERROR(conv2d_forward(zeros({2, 4, 5, 5}, DType::i64), zeros({6, 2, 3, 3}, DType::i64), Tensor(), g2),
                   "conv2d_forward");
  CHECK_REEL_ERROR(conv2d_forward(zeros({2, 0, 5, 5}), zeros({6, 0, 3, 3}), Tensor(), {}),
                   "conv2d_forward: x (2, 0, 5, 5) has no input channels");
  // Backward: dy must be the output x and w give.
  CHECK_REEL_ERROR(conv2d_backward_input(zeros({2, 6, 3, 4}), w, x.shape(), g2),
                   "conv2d_backward_input: dy (2, 6, 3, 4) does not match the output (2, 6, 3, 3) of x (2, 4, 5, 5) "
                   "convolved with weight (6, 2, 3, 3)");
  CHECK_REEL_ERROR(conv2d_backward_weight(zeros({2, 6, 3, 3}), x, {6, 4, 3, 3}, g2),
                   "conv2d_backward_weight: weight (6, 4, 3, 3) does not match the 4 input channels of x");
  CHECK_REEL_ERROR(conv2d_backward_bias(zeros({2, 6})), "conv2d_backward_bias: dy (2, 6) must be 4-D");
  if (cuda_available()) {
    CHECK_REEL_ERROR(conv2d_forward(x.to(Device::cuda(0)), w, Tensor(), g2),
                     "conv2d_forward: expected all tensors on one device");
    CHECK_REEL_ERROR(conv2d_forward(x, w, zeros({6}, DType::f32, Device::cuda(0)), g2),
                     "conv2d_forward: expected all tensors on one device");
  }
}
