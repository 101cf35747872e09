// tests/test_cuda_ops.cpp: the CUDA backend's own edge cases. Every op's values on cuda against the
// CPU are rows of the op table (tests/op_table/); here: poisoned allocations read NaN or -1,
// transfers are exact and cuda memory is counted by category, mixed devices and absent devices are
// refused, a failed launch or runtime call is reported (tests/cuda_test_kernels.cu), and the tiled
// teaching SGEMM agrees with cuBLAS on the device itself. Runs on the emulated device
// (kernels/simt) or a real GPU; skips without one.
#include <cmath>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"
#include "kernels/ops.h"
#include "testing.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "cuda_test_kernels.h"
#include "kernels/cuda/cuda_only.h"
#endif

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

REEL_TEST_REQUIRES_CUDA();

namespace {
const Device kCuda = Device::cuda(0);
}  // namespace

TEST_CASE("the tiled SGEMM (teaching kernel) matches cuBLAS on the device") {
#if defined(REEL_HAS_CUDA_BACKEND)
  // f32, a size with partial tiles on every edge, b broadcast over the batch.
  reel::testing::Poisoned poison;
  Generator g(5);
  Tensor a = randn({2, 45, 70}, DType::f32, kCuda, &g), b = randn({70, 33}, DType::f32, kCuda, &g);
  Tensor out = empty({2, 45, 33}, DType::f32, kCuda);
  kernels::cuda::matmul_tiled(a, b.expand({2, 70, 33}), out);
  check_close(out, matmul(a, b), 1e-5, 1e-5);
#endif
}

TEST_CASE("poisoned allocations: a fresh cuda tensor reads NaN (floats) or -1 (integers)") {
  set_poison_allocations(true);
  for (const double v : values(empty({37}, DType::f32, kCuda))) CHECK(std::isnan(v));
  for (const double v : values(empty({37}, DType::f64, kCuda))) CHECK(std::isnan(v));
  for (const double v : values(empty({37}, DType::i32, kCuda))) CHECK(v == -1);
  for (const double v : values(empty({37}, DType::i64, kCuda))) CHECK(v == -1);
}

TEST_CASE("transfers between cpu and cuda are exact; cuda memory is counted by category") {
  set_poison_allocations(true);
  Generator g(11);
  Tensor x = randn({31, 33}, DType::f64, Device::cpu(), &g);
  Tensor y = x.to(kCuda);
  CHECK(y.device() == kCuda);
  CHECK(y.to(Device::cpu()).to_vector<double>() == x.to_vector<double>());
  CHECK(y.select(0, 4).select(0, 7).item() == x.select(0, 4).select(0, 7).item());
  CHECK(y.clone().to_vector<double>() == x.to_vector<double>());
  const MemoryStats before = memory_stats(kCuda);
  {
    MemoryCategory scope(Category::Parameter);
    Tensor p = empty({1000}, DType::f32, kCuda);
    CHECK(memory_stats(kCuda)[Category::Parameter].current_bytes ==
          before[Category::Parameter].current_bytes + 4000);
  }
  CHECK(memory_stats(kCuda)[Category::Parameter].current_bytes == before[Category::Parameter].current_bytes);
}

TEST_CASE("a cpu tensor with a cuda tensor raises reel::Error naming both devices") {
  Tensor a = ones({3, 4});
  Tensor b = ones({3, 4}, DType::f32, kCuda);
  CHECK_REEL_ERROR(binary(BinaryOp::Add, a, b), "expected all tensors on one device");
  CHECK_REEL_ERROR(binary(BinaryOp::Mul, b, a), "cuda:0");
  CHECK_REEL_ERROR(matmul(a, b.t()), "expected all tensors on one device");
  // compare, where and unary_backward check devices too
  CHECK_REEL_ERROR(compare(CompareOp::Gt, a, b), "gt: expected all tensors on one device, got (3, 4) on cpu (3, 4) on cuda:0");
  CHECK_REEL_ERROR(where(b, a, b), "where: expected all tensors on one device");
  CHECK_REEL_ERROR(unary_backward(UnaryOp::Gelu, b, a), "gelu_backward: expected all tensors on one device");
  CHECK_REEL_ERROR(empty({2}, DType::f32, Device::cuda(7)), "cuda:7 is not available");
}

TEST_CASE("a failed launch or runtime call raises reel::Error naming the kernel or call and CUDA's error") {
#if defined(REEL_HAS_CUDA_BACKEND)
  CHECK_NOTHROW(reel::testing::launch_noop_kernel(256));
  // > 1024 threads per block: CUDA 13 says cudaErrorInvalidValue (older: ...InvalidConfiguration).
  CHECK_REEL_ERROR(reel::testing::launch_noop_kernel(4096), "cuda kernel noop_kernel");
  CHECK_REEL_ERROR(reel::testing::launch_noop_kernel(4096), "launch failed: cudaError");
  CHECK_REEL_ERROR(reel::testing::checked_set_device(99), "cudaSetDevice(index)");
  CHECK_REEL_ERROR(reel::testing::checked_set_device(99), "cudaErrorInvalidDevice");
  CHECK_NOTHROW(reel::testing::launch_noop_kernel(32));  // the errors were cleared
#endif
}
