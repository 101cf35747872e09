// tensor_basics: creates tensors, multiplies them, and prints where the memory went.
//   ./tensor_basics [cpu|cuda]
#include <cstdio>
#include <iostream>

#include "reel.h"

using namespace reel;

int main(int argc, char** argv) {
  try {
    const Device device(argc > 1 ? argv[1] : "cpu");
    manual_seed(0);
    Tensor w, x;
    {
      MemoryCategory params(Category::Parameter);
      w = randn({256, 512}, DType::f32, device);  // (out, in)
    }
    {
      MemoryCategory acts(Category::Activation);
      x = randn({64, 512}, DType::f32, device);   // (batch, in)
    }
    Tensor y = kernels::matmul(x, w, false, true);  // (batch, out) = x @ wᵀ
    Tensor h = kernels::unary(kernels::UnaryOp::Gelu, y);
    Tensor row_mean = kernels::mean(h, {1});
    std::cout << "x @ wT then gelu: " << h.str() << "\n";
    std::cout << "per-row mean:     " << row_mean.narrow(0, 0, 4).str() << "\n";
    std::cout << "small example:\n"
              << kernels::matmul(arange(6).view({2, 3}), arange(6).view({3, 2})).str() << "\n\n";
    std::cout << memory_report();
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
