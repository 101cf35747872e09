// Tensor basics: factories, views sharing storage, contiguous/clone/to, item/to_vector,
// printing, devices and bad inputs.
#include <climits>
#include <cmath>

#include "testing.h"

using namespace reel;
using reel::testing::check_close;

TEST_CASE("factories make the shapes, dtypes and values asked for") {
  Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == DType::f32);
  CHECK(z.device() == Device::cpu());
  CHECK(z.strides() == Shape{3, 1});
  check_close(z, std::vector<double>(6, 0.0));
  check_close(ones({4}, DType::f64), std::vector<double>(4, 1.0));
  check_close(full({2, 2}, 2.5), {2.5, 2.5, 2.5, 2.5});
  check_close(arange(5), {0, 1, 2, 3, 4});
  check_close(arange(1.0, 2.0, 0.25, DType::f64), {1.0, 1.25, 1.5, 1.75});
  CHECK(arange(3, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK(scalar_tensor(3.5).dim() == 0);
  CHECK(scalar_tensor(3.5).item() == 3.5);
  CHECK(empty({0, 3}).numel() == 0);
  CHECK(from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}).to_vector<double>() ==
        std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("views share storage with their base") {
  Tensor a = arange(12).view({3, 4});
  Tensor row = a.select(0, 1);
  row.fill_(-1);
  check_close(a, {0, 1, 2, 3, -1, -1, -1, -1, 8, 9, 10, 11});
  CHECK(row.storage() == a.storage());

  Tensor t = a.t();
  CHECK(t.shape() == Shape{4, 3});
  CHECK(t.strides() == Shape{1, 4});
  CHECK_FALSE(t.is_contiguous());
  check_close(t.contiguous(), {0, -1, 8, 1, -1, 9, 2, -1, 10, 3, -1, 11});

  Tensor s = a.slice(1, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{3, 2});
  check_close(s, {1, 3, -1, -1, 9, 11});
  check_close(a.narrow(0, 2, 1), {8, 9, 10, 11});
  check_close(a.slice(0, -1, 3), {8, 9, 10, 11});

  Tensor p = arange(24).view({2, 3, 4}).permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.contiguous().to_vector<float>()[1] == 4.0f);

  CHECK(a.unsqueeze(0).shape() == Shape{1, 3, 4});
  CHECK(a.unsqueeze(-1).shape() == Shape{3, 4, 1});
  CHECK(a.unsqueeze(0).squeeze(0).shape() == Shape{3, 4});
  Tensor e = tensor({1, 2, 3}).view({3, 1}).expand({3, 2});
  CHECK(e.strides() == Shape{1, 0});
  check_close(e, {1, 1, 2, 2, 3, 3});
}

TEST_CASE("view needs compatible strides, reshape copies when it must") {
  Tensor a = arange(6).view({2, 3});
  CHECK(a.view({3, 2}).storage() == a.storage());
  CHECK(a.view({-1}).shape() == Shape{6});
  CHECK(a.view({1, 2, 1, 3}).shape() == Shape{1, 2, 1, 3});
  Tensor t = a.t();
  CHECK_REEL_ERROR(t.view({6}), "cannot be viewed as (6)");
  Tensor r = t.reshape({6});
  CHECK(r.storage() != a.storage());
  check_close(r, {0, 3, 1, 4, 2, 5});
  // A transposed view whose merged dims stay contiguous is still viewable.
  Tensor b = arange(24).view({4, 6}).t();  // (6, 4) with strides (1, 6)
  CHECK(b.view({6, 2, 2}).strides() == Shape{1, 12, 6});
  check_close(b.view({6, 2, 2}), b.contiguous().view({6, 2, 2}));
  CHECK_REEL_ERROR(b.view({24}), "cannot be viewed");
  CHECK_REEL_ERROR(a.view({4, 2}), "cannot reshape (2, 3) (6 elements) into (4, 2)");
  CHECK_REEL_ERROR(a.view({-1, -1}), "only one dimension can be -1");
}

TEST_CASE("clone, copy_ and dtype conversion") {
  Tensor a = arange(4, DType::f64);
  Tensor c = a.clone();
  c.fill_(7);
  check_close(a, {0, 1, 2, 3});
  Tensor f = a.to(DType::f32);
  CHECK(f.dtype() == DType::f32);
  check_close(f, {0, 1, 2, 3});
  CHECK(from_vector<double>({1.7, -2.7}, {2}).to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2});
  Tensor dst = zeros({2, 2});
  dst.copy_(from_vector<double>({1, 2, 3, 4}, {2, 2}).t());
  check_close(dst, {1, 3, 2, 4});
  CHECK_REEL_ERROR(dst.copy_(zeros({3})), "copy_: source shape (3) does not match destination shape (2, 2)");
}

TEST_CASE("printing shows values, shape, dtype and device") {
  const std::string s = arange(6).view({2, 3}).str();
  CHECK(s.find("[[0, 1, 2],") != std::string::npos);
  CHECK(s.find("shape=(2, 3)") != std::string::npos);
  CHECK(s.find("dtype=f32") != std::string::npos);
  CHECK(s.find("device=cpu") != std::string::npos);
  const std::string big = arange(5000).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 200);
  CHECK(scalar_tensor(2).str().find("tensor(2,") == 0);
}

TEST_CASE("devices parse and unavailable devices are reported") {
  CHECK(Device("cpu").is_cpu());
  CHECK(Device("cuda:1").index == 1);
  CHECK(Device("cuda").index == 0);
  CHECK(Device("cuda:2").str() == "cuda:2");
  CHECK_REEL_ERROR(Device("tpu"), "cannot parse 'tpu'");
  CHECK_REEL_ERROR(Device("cuda:x"), "cannot parse 'cuda:x'");
  if (!cuda_available()) CHECK_REEL_ERROR(zeros({2}, DType::f32, Device::cuda()), "cuda:0 is not available");
  CHECK_REEL_ERROR(zeros({2}, DType::f32, Device::cuda(1000)), "cuda:1000 is not available");
}

TEST_CASE("bad inputs raise reel::Error naming the op and shapes") {
  Tensor a = zeros({2, 3});
  CHECK_REEL_ERROR(a.item(), "item: expects a tensor with one element, got shape (2, 3)");
  CHECK_REEL_ERROR(a.transpose(0, 2), "transpose: dim 2 is out of range for a tensor of rank 2");
  CHECK_REEL_ERROR(a.permute({0, 0}), "permute: dim 0 repeated");
  CHECK_REEL_ERROR(a.narrow(1, 2, 2), "narrow: [2, 4) is out of range for dim 1 of shape (2, 3)");
  CHECK_REEL_ERROR(a.expand({4, 3}), "expand: cannot expand shape (2, 3) to (4, 3)");
  CHECK_REEL_ERROR(a.to_vector<double>(), "to_vector<f64>: tensor has dtype f32");
  CHECK_REEL_ERROR(empty({2, -1}), "empty: negative dimension in shape (2, -1)");
  CHECK_REEL_ERROR(Tensor().shape(), "undefined");
  CHECK_REEL_ERROR(rand({2}, DType::i32), "rand: dtype must be floating, got i32");
  CHECK_REEL_ERROR(from_vector<float>({1, 2}, {3}), "from_vector: 2 values do not fill shape (3)");
}

// Size arithmetic is checked (core/checked_math.h): a shape whose element count, strides or byte
// count do not fit in int64 is refused by name, never wrapped into a small or negative size.
TEST_CASE("factory shapes whose sizes overflow int64 raise reel::Error") {
  CHECK_REEL_ERROR(zeros({1LL << 32, 1LL << 32}), "empty: shape (4294967296, 4294967296) is too large");
  CHECK_REEL_ERROR(empty({3037000500, 3037000500}), "empty: shape (3037000500, 3037000500) is too large");
  CHECK_REEL_ERROR(empty({1LL << 62}), "empty: shape (4611686018427387904) is too large");  // the bytes overflow
  // No elements, but the contiguous strides would not fit.
  CHECK_REEL_ERROR(empty({0, 1LL << 32, 1LL << 32}), "empty: shape (0, 4294967296, 4294967296) is too large");
  CHECK_REEL_ERROR(full({-3, 2}, 1.0), "negative dimension in shape (-3, 2)");
  // Zero-element tensors whose strides fit are fine, and so are their views.
  Tensor z = empty({1LL << 40, 0, 1LL << 40});
  CHECK(z.numel() == 0);
  CHECK(z.unsqueeze(0).shape() == Shape{1, 1LL << 40, 0, 1LL << 40});
  CHECK(z.select(2, (1LL << 40) - 1).numel() == 0);
  CHECK(z.slice(0, 5, 7).shape() == Shape{2, 0, 1LL << 40});
}

TEST_CASE("expand refuses negative sizes and sizes whose element count overflows") {
  Tensor a = zeros({1, 3});
  CHECK_REEL_ERROR(a.expand({-2, 3}), "expand: invalid size -2");
  CHECK_REEL_ERROR(a.expand({2, 1, -5}), "expand: invalid size -5");
  CHECK_REEL_ERROR(ones({1}).expand({1LL << 32, 1LL << 32}), "expand: shape (4294967296, 4294967296) is too large");
  CHECK(a.expand({-1, 3}).shape() == Shape{1, 3});
  CHECK(a.expand({4, -1}).shape() == Shape{4, 3});
}

TEST_CASE("narrow and slice with extreme bounds clamp or refuse without overflow") {
  Tensor a = arange(12).view({3, 4});
  CHECK_REEL_ERROR(a.narrow(0, 2, INT64_MAX), "narrow: [2, 2 + 9223372036854775807) is out of range for dim 0");
  CHECK_REEL_ERROR(a.narrow(1, 1, -1), "out of range for dim 1");
  CHECK_REEL_ERROR(a.narrow(1, 5, 0), "out of range for dim 1");
  check_close(a.narrow(1, -2, 2), {2, 3, 6, 7, 10, 11});  // a negative start counts from the end, as in PyTorch
  check_close(a.narrow(0, 3, 0), std::vector<double>{});
  Tensor s = a.slice(1, 0, 4, INT64_MAX);
  CHECK(s.shape() == Shape{3, 1});
  check_close(s, {0, 4, 8});
  CHECK(a.slice(0, 1, INT64_MAX).shape() == Shape{2, 4});
  CHECK(a.slice(0, INT64_MIN, INT64_MAX).shape() == Shape{3, 4});
  CHECK(a.slice(1, INT64_MAX, INT64_MAX, INT64_MAX).shape() == Shape{3, 0});
  check_close(a.slice(1, 1, INT64_MAX, 2), {1, 3, 5, 7, 9, 11});
}

TEST_CASE("arange refuses non-finite bounds, a zero step and counts that do not fit") {
  CHECK_REEL_ERROR(arange(0, NAN), "arange: start, end and step must be finite");
  CHECK_REEL_ERROR(arange(0, INFINITY), "arange: start, end and step must be finite");
  CHECK_REEL_ERROR(arange(-INFINITY, 0), "must be finite");
  CHECK_REEL_ERROR(arange(0, 1, NAN), "must be finite");
  CHECK_REEL_ERROR(arange(0, 1, 0), "arange: step must be non-zero");
  CHECK_REEL_ERROR(arange(0.0, 1e300), "arange: [0, 1e+300) with step 1 has too many elements");
  CHECK_REEL_ERROR(arange(-1e308, 1e308), "too many elements");
  CHECK(arange(3, 0).numel() == 0);
}

TEST_CASE("untracked::joined undoes consecutive narrows and refuses anything else") {
  const Tensor a = arange(24).view({2, 3, 4});
  const Tensor p0 = a.narrow(2, 0, 1), p1 = a.narrow(2, 1, 2), p2 = a.narrow(2, 3, 1);
  const Tensor whole = untracked::joined({p0, p1, p2}, -1);
  REQUIRE(whole.defined());
  CHECK(whole.shape() == a.shape());
  CHECK(whole.strides() == a.strides());
  CHECK(whole.data_ptr() == a.data_ptr());  // a view, no copy
  check_close(whole, a);
  const Tensor rows = untracked::joined({a.narrow(1, 1, 1), a.narrow(1, 2, 1)}, 1);  // part of a dim
  REQUIRE(rows.defined());
  check_close(rows, a.narrow(1, 1, 2));
  CHECK_FALSE(untracked::joined({p1, p0, p2}, 2).defined());                     // out of order
  CHECK_FALSE(untracked::joined({p0, p2}, 2).defined());                         // a gap
  CHECK_FALSE(untracked::joined({p0, a.clone().narrow(2, 1, 3)}, 2).defined());  // another storage
  CHECK_FALSE(untracked::joined({p0, p1.contiguous()}, 2).defined());            // a copy
  CHECK_FALSE(untracked::joined({p0, a.narrow(2, 1, 0), p1}, 2).defined());      // an empty piece
  CHECK_FALSE(untracked::joined({p0, Tensor()}, 2).defined());
  CHECK_FALSE(untracked::joined({}, 0).defined());
  const Tensor b = tensor({1, 2}).view({2, 1}).expand({2, 4});  // stride 0 along dim 1: pieces overlap
  CHECK_FALSE(untracked::joined({b.narrow(1, 0, 2), b.narrow(1, 2, 2)}, 1).defined());
}
