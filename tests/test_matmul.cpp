// matmul edge cases (its values against an f64 reference, 2-D on awkward sizes, batched with broadcast
// batch dims, transposes and strided operands on every device, are rows of tests/op_table/matmul.cpp): the
// output shapes of broadcast batches, 1-D operands and empty dims as numpy.matmul, shape errors,
// the fused bias (values vs an f64 reference on every device, its errors), matmul_into_ (the
// product written or added into an existing output), thread-count bit identity (f32, f64, bf16, f16),
// and, on the emulated cuda, the bias epilogue's bits and launches against the composition it replaced.
#include <algorithm>

#include "kernels/ops.h"
#include "testing.h"
#if defined(REEL_CUDA_EMULATED)
// The launch log (host code of the emulated flavour only). Last: simt.h defines the CUDA keywords
// as macros.
#include "kernels/cuda/launch.h"
#endif

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

TEST_CASE("batched matmul broadcasts batch dims: the output shapes") {
  CHECK(matmul(zeros({2, 1, 5, 3}), zeros({4, 3, 6})).shape() == Shape{2, 4, 5, 6});
  CHECK(matmul(zeros({2, 3, 7, 4}), zeros({2, 3, 7, 4}), false, true).shape() == Shape{2, 3, 7, 7});  // q k^T
}

TEST_CASE("1-D operands and empty dims follow numpy.matmul") {
  Tensor m = arange(6, DType::f64).view({2, 3});
  Tensor v = from_vector<double>({1, 1, 1}, {3});
  Tensor mv = matmul(m, v);
  CHECK(mv.shape() == Shape{2});
  check_close(mv, {3, 12});
  Tensor vm = matmul(from_vector<double>({1, 1}, {2}), m);
  CHECK(vm.shape() == Shape{3});
  check_close(vm, {3, 5, 7});
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, v).item() == 3.0);
  check_close(matmul(zeros({2, 0}), zeros({0, 3})), std::vector<double>(6, 0.0));
  CHECK(matmul(zeros({0, 4}), zeros({4, 3})).shape() == Shape{0, 3});
}

TEST_CASE("incompatible matmul shapes raise reel::Error naming both shapes") {
  CHECK_REEL_ERROR(matmul(zeros({4, 3}), zeros({5, 2})),
                   "matmul: shapes (4, 3) and (5, 2) are not compatible: inner dims 3 != 5");
  // Batch dims that do not broadcast: both full shapes, then the batch dims.
  CHECK_REEL_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})),
                   "matmul: shapes (2, 2, 3) and (3, 3, 2): batch dims (2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({4, 2, 5, 3}), zeros({3, 3, 2})),
                   "matmul: shapes (4, 2, 5, 3) and (3, 3, 2): batch dims (4, 2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({2, 3, 5}), zeros({3, 4, 3}), true, true),
                   "matmul: shapes (2, 3, 5)^T and (3, 4, 3)^T: batch dims (2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({3}), zeros({3}), true, false), "a transpose needs a 2-D or higher operand");
  CHECK_REEL_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, DType::f64)), "matmul: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(matmul(scalar_tensor(1), zeros({2})), "need at least one dim");
}

// Checkpointed and plain gradients are compared bit for bit, and a run should not change its results
// with --threads: the CPU GEMM (kernels/cpu/gemm.h: oneDNN's sgemm for f32 where reel is built with
// it, Eigen for f64 and otherwise) must not let the thread count change how a product's sums are
// ordered, e.g. by splitting K across threads or by cutting a product into blocks per thread (both
// engines order an element's sum by the block shape they are given). The shapes: an MLP's forward
// and both backward products, a long K with a small output (where a library is most tempted to
// split K), a 1024-wide layer (cut into column blocks), a tall product (cut into row blocks), a
// batched q k^T, a row stride larger than the row (a narrowed operand), and the char GPT's weight
// gradients over 2048 rows. In f32, f64, bf16 and f16 (a 16-bit product's K slices are summed and
// rounded once in the GEMMs' parallel region), each plain, with a bias, and accumulated into an output.
TEST_CASE("CPU matmul is bit-identical across thread counts") {
  using reel::testing::bit_identical;
  using reel::testing::for_thread_counts;
  using reel::testing::uniform_f64;
  struct Case {
    Shape a, b;
    bool ta, tb;
    int64_t a_cols;  // a is narrowed to this many columns (0: a whole)
  };
  const std::vector<Case> cases = {
      {{128, 784}, {512, 784}, false, true, 0},   // x W^T
      {{128, 512}, {128, 784}, true, false, 0},   // dW = g^T x
      {{128, 512}, {512, 784}, false, false, 0},  // dx = g W
      {{16, 8192}, {8192, 16}, false, false, 0},  // long K, 16x16 output
      {{256, 1024}, {1024, 1024}, false, true, 0},
      {{1024, 96}, {96, 256}, false, false, 0},
      {{8, 64, 32}, {8, 64, 32}, false, true, 0},
      {{16, 8200}, {8192, 16}, false, false, 8192},
      {{2048, 288}, {2048, 96}, true, false, 0},  // dW with a long K: cut into K slices
      {{2000, 300}, {2000, 96}, true, false, 0},  // the same, K = 2000 not a multiple of the slices
      {{200, 1100}, {200, 64}, true, false, 0},   // dW of a wide layer over a short batch: blocks of 512+
      {{2048, 384}, {2048, 96}, true, false, 0},  // the char GPT's dW of a (96 -> 384) Linear
      {{2048, 96}, {2048, 384}, true, false, 0},  // ... of a (384 -> 96) Linear
      {{2048, 80}, {2048, 96}, true, false, 0},   // ... of its head
  };
  uint64_t seed = 40;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const Case& c : cases) {
      CAPTURE(shape_str(c.a));
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      Tensor a = uniform_f64(c.a, ++seed).to(dtype);
      const Tensor b = uniform_f64(c.b, ++seed).to(dtype);
      if (c.a_cols) a = a.narrow(-1, 0, c.a_cols);
      std::vector<Tensor> runs;
      for_thread_counts({1, 2, 3, 8}, [&] { runs.push_back(matmul(a, b, c.ta, c.tb)); });
      for (size_t i = 1; i < runs.size(); ++i) CHECK(bit_identical(runs[i], runs[0]));
      // With a bias (the bias rows, the product accumulated onto them, per block).
      const Tensor bias = uniform_f64({c.b[c.tb ? c.b.size() - 2 : c.b.size() - 1]}, ++seed).to(dtype);
      std::vector<Tensor> biased;
      for_thread_counts({1, 2, 3, 8}, [&] { biased.push_back(matmul(a, b, c.ta, c.tb, bias)); });
      for (size_t i = 1; i < biased.size(); ++i) CHECK(bit_identical(biased[i], biased[0]));
      // Accumulated onto an output's values (a gradient sink).
      const Tensor init = uniform_f64(runs[0].shape(), ++seed).to(dtype);
      std::vector<Tensor> added;
      for_thread_counts({1, 2, 3, 8}, [&] {
        added.push_back(init.clone());
        kernels::matmul_into_(added.back(), a, b, c.ta, c.tb, /*accumulate=*/true);
      });
      for (size_t i = 1; i < added.size(); ++i) CHECK(bit_identical(added[i], added[0]));
    }
  }
}

// ---- bias ----------------------------------------------------------------------------------------

namespace {
// numpy.matmul of 2-D-or-more a and b (flags applied first) plus bias (N) on every row, in f64
// on the host from the operands' values: the reference the fused bias is checked against.
std::vector<double> matmul_bias_ref(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, const Tensor& bias) {
  const Tensor a = (ta ? a_in.transpose(-2, -1) : a_in).to(Device::cpu()).to(DType::f64);
  const Tensor b = (tb ? b_in.transpose(-2, -1) : b_in).to(Device::cpu()).to(DType::f64);
  const Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2), "matmul_bias_ref");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  const std::vector<double> av = values(a.expand(sa)), bv = values(b.expand(sb)), cv = values(bias);
  const int64_t batches = shape_numel(batch);
  std::vector<double> out(batches * M * N);
  for (int64_t p = 0; p < batches; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = cv[j];
        for (int64_t k = 0; k < K; ++k) acc += av[(p * M + i) * K + k] * bv[(p * K + k) * N + j];
        out[(p * M + i) * N + j] = acc;
      }
  return out;
}

// "(7, 6) @ (7, 4) f32 on cpu": what a case of the tests below runs, for CAPTURE.
std::string case_label(const Shape& a, const Shape& b, DType dtype, Device device) {
  return shape_str(a) + " @ " + shape_str(b) + " " + dtype_name(dtype) + " on " + (device.is_cuda() ? "cuda" : "cpu");
}
}  // namespace

// The shapes: x W^T as linear runs it, plain and transposed-a products, a broadcast batch (the bias
// reaches every row of every product), a row stride larger than the row, a strided bias view, a
// product large enough that the CPU cuts it into column blocks (the bias slice follows each
// block), and an empty inner dim (the output is the bias rows alone).
TEST_CASE("matmul with a bias matches an f64 reference on every device") {
  using reel::testing::devices;
  using reel::testing::uniform_f64;
  struct Case {
    Shape a, b;
    bool ta, tb;
    int64_t a_cols;      // a is narrowed to this many columns (0: a whole)
    bool strided_bias;   // the bias is every second element of a (2N) vector
  };
  const std::vector<Case> cases = {
      {{37, 33}, {20, 33}, false, true, 0, false},       // x W^T
      {{5, 7}, {7, 9}, false, false, 0, true},           // plain, strided bias
      {{7, 6}, {7, 4}, true, false, 0, false},           // a^T b
      {{2, 1, 5, 3}, {4, 3, 6}, false, false, 0, false}, // broadcast batch (2, 4)
      {{3, 8, 5}, {6, 5}, false, true, 0, true},         // a batch of a against one W^T
      {{9, 40}, {32, 11}, false, false, 32, false},      // row stride 40 > row 32
      {{96, 128}, {600, 128}, false, true, 0, false},    // cut into 2 column blocks (kernels/cpu/matmul.cpp)
      {{1100, 40}, {1100, 120}, true, false, 0, false},  // cut into 2 K slices (a weight gradient's shape)
      {{3, 0}, {0, 4}, false, false, 0, false},          // K = 0
  };
  uint64_t seed = 700;
  for (const Device device : devices()) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& c : cases) {
        const std::string what = case_label(c.a, c.b, dtype, device);
        CAPTURE(what);
        Tensor a = uniform_f64(c.a, ++seed).to(dtype).to(device);
        if (c.a_cols) a = a.narrow(-1, 0, c.a_cols);
        const Tensor b = uniform_f64(c.b, ++seed).to(dtype).to(device);
        const int64_t N = c.tb ? c.b[c.b.size() - 2] : c.b.back();
        const Tensor bias = c.strided_bias ? uniform_f64({2 * N}, ++seed).to(dtype).to(device).slice(0, 0, 2 * N, 2)
                                           : uniform_f64({N}, ++seed).to(dtype).to(device);
        const std::vector<double> ref = matmul_bias_ref(a, b, c.ta, c.tb, bias);
        const double tol = dtype == DType::f32 ? 2e-5 : 1e-12;
        reel::testing::for_thread_counts({1, 3}, [&] {
          const Tensor out = matmul(a, b, c.ta, c.tb, bias);
          CHECK(out.device() == device);
          CHECK(out.shape() == matmul(a, b, c.ta, c.tb).shape());
          check_close(out, ref, tol, tol);
        });
      }
    }
  }
}

// matmul_into_: out += op(a) @ op(b) in place, against out's old values plus the f64 product (and
// out = the product without accumulate), for a single block, column blocks and K slices (the
// first slice accumulates onto out).
TEST_CASE("matmul_into_ adds or writes the product into out on every device") {
  using reel::testing::devices;
  using reel::testing::uniform_f64;
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{7, 6}, {7, 4}, true, false},         // dW = G^T X, one block
      {{96, 128}, {600, 128}, false, true},  // column blocks
      {{1100, 40}, {1100, 120}, true, false},  // K slices
      {{2, 5, 3}, {2, 3, 4}, false, false},  // a batch
  };
  uint64_t seed = 900;
  for (const Device device : devices()) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& c : cases) {
        const std::string what = case_label(c.a, c.b, dtype, device);
        CAPTURE(what);
        const Tensor a = uniform_f64(c.a, ++seed).to(dtype).to(device);
        const Tensor b = uniform_f64(c.b, ++seed).to(dtype).to(device);
        const Tensor out = uniform_f64(matmul(a, b, c.ta, c.tb).shape(), ++seed).to(dtype).to(device);
        const Tensor zero_bias = zeros({out.size(-1)}, DType::f64);
        std::vector<double> ref = matmul_bias_ref(a, b, c.ta, c.tb, zero_bias);
        const std::vector<double> before = values(out);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += before[i];
        const uint64_t version = out.version();
        matmul_into_(out, a, b, c.ta, c.tb);
        CHECK(out.version() > version);
        // f32's rounding error grows with the length K of each summed dot product: 2e-5 per 256
        // terms (K = 1100's error is 2.5e-5 on Eigen's path without FMA: -O1, no -march=native).
        const int64_t K = c.ta ? c.a[c.a.size() - 2] : c.a.back();
        const double tol = dtype == DType::f32 ? 2e-5 * static_cast<double>(std::max<int64_t>(1, K / 256)) : 1e-12;
        check_close(out, ref, tol, tol);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] -= before[i];
        matmul_into_(out, a, b, c.ta, c.tb, false);  // written: the old values are not read
        check_close(out, ref, tol, tol);
      }
    }
  }
  CHECK_REEL_ERROR(matmul_into_(zeros({3, 5}), zeros({3, 4}), zeros({4, 4})),
                   "matmul_into_: out (3, 5) f32 on cpu cannot take the product of (3, 4) and (4, 4): a contiguous "
                   "(3, 4) f32 on cpu expected");
  CHECK_REEL_ERROR(matmul_into_(zeros({4, 3}).transpose(0, 1), zeros({3, 4}), zeros({4, 4})),
                   "(not contiguous)");
  CHECK_REEL_ERROR(matmul_into_(zeros({3}), zeros({3, 4}), zeros({4})), "two operands of at least 2 dims");
}

TEST_CASE("a bad matmul bias raises reel::Error naming the op, shapes and devices") {
  const Tensor a = zeros({4, 3}), b = zeros({3, 5});
  CHECK_REEL_ERROR(matmul(a, b, false, false, zeros({4})),
                   "matmul: shapes (4, 3) and (3, 5): bias (4) on cpu does not match: (5) expected");
  CHECK_REEL_ERROR(matmul(a, b, false, false, zeros({1, 5})),
                   "matmul: shapes (4, 3) and (3, 5): bias (1, 5) on cpu does not match: (5) expected");
  CHECK_REEL_ERROR(matmul(a, zeros({5, 3}), false, true, zeros({3})),
                   "matmul: shapes (4, 3) and (5, 3)^T: bias (3) on cpu does not match: (5) expected");
  CHECK_REEL_ERROR(matmul(a, b, false, false, scalar_tensor(1)), "bias () on cpu does not match: (5) expected");
  CHECK_REEL_ERROR(matmul(a, b, false, false, zeros({5}, DType::f64)), "matmul: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(matmul(a, b, false, false, zeros({5}, DType::i64)), "matmul: dtype i64 of the (5) tensor");
  if (cuda_available())
    CHECK_REEL_ERROR(matmul(a, b, false, false, zeros({5}).to(Device::cuda(0))),
                     "matmul: expected all tensors on one device, got (4, 3) on cpu (3, 5) on cpu (5) on cuda:0");
}

#if defined(REEL_CUDA_EMULATED)
// On cuda a biased product that is one 2-D GEMM is one cublasLtMatmul whose epilogue adds the bias
// (CUBLASLT_EPILOGUE_BIAS, kernels/cuda/matmul.cu): no kernel of reel's runs. Any other (a batch
// that does not collapse into rows, f64) is the bias rows (bias_rows_kernel) with the product
// accumulated onto them (beta = 1). cuda and meta launch the same (meta records what cuda does).
// The bits, in the emulation: the epilogue adds the bias to each element's f32 sum and rounds once
// to the output type, so out = (the unbiased f32 product of the same GEMM + bias, in f32) rounded:
// the reference below, on widened operands (a (B, T, C) operand as its (B T, C) rows, the one GEMM
// the epilogue runs). bf16 / f16 (and f64, and every fallback case) also give the bits of the
// composition the epilogue replaced (matmul_into_ onto the bias rows): the emulated GemmEx forms the
// product first too. f32 need not: the emulated Sgemm with beta = 1 lets Eigen add its depth blocks
// onto the bias rows one by one (K = 1100 below), and a batch of small products may take Eigen's
// coefficient-wise product where their (rows, K) whole takes its GEMM; a GPU's order differs again.
// Shapes that take the epilogue (x W^T, a^T b, a batch of rows against one W^T, narrowed rows,
// K past Eigen's depth block) and ones that do not (a broadcast batch, a batch whose rows are not
// one run); f32 with and without TF32, bf16, f16, f64.
TEST_CASE("cuda's bias epilogue gives the bits of the bias rows plus the product, in one launch") {
  using reel::testing::bit_identical;
  using reel::testing::uniform_f64;
  struct Case {
    Shape a, b;
    bool ta, tb;
    int64_t a_cols;     // a is narrowed to this many columns (0: a whole)
    bool transpose_01;  // a is made (dim 1, dim 0, ...) of what was made: its rows are not one run
    bool epilogue;      // expected to take the epilogue (in f32, bf16, f16)
  };
  const std::vector<Case> cases = {
      {{37, 33}, {20, 33}, false, true, 0, false, true},        // x W^T
      {{7, 6}, {7, 4}, true, false, 0, false, true},            // a^T b: a read transposed
      {{3, 8, 5}, {6, 5}, false, true, 0, false, true},         // (B, T, C) against one W^T: rows 24
      {{4, 6, 10}, {9, 8}, false, true, 8, false, true},        // narrowed rows, batch stride 60 = 6 * 10
      {{64, 1100}, {1100, 48}, false, false, 0, false, true},   // K = 1100 (Eigen's GEMM cuts K into blocks)
      {{2, 1, 5, 3}, {4, 3, 6}, false, false, 0, false, false}, // broadcast batch (2, 4): one batched call
      {{6, 4, 8}, {8, 5}, false, false, 0, true, false},        // rows of a (4, 6, 8) view are not one run
  };
  struct Tf32Guard {  // restores the process-wide switch however the test ends
    bool saved = allow_tf32();
    ~Tf32Guard() { set_allow_tf32(saved); }
  } guard;
  uint64_t seed = 1300;
  for (const Device device : {Device::cuda(0), Device::meta()}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
      for (const bool tf32 : {false, true}) {
        if (tf32 && dtype != DType::f32) continue;
        set_allow_tf32(tf32);
        for (const Case& c : cases) {
          const std::string what = shape_str(c.a) + " @ " + shape_str(c.b) + " " + dtype_name(dtype) + " on " +
                                   device.str() + (tf32 ? " (TF32)" : "");
          CAPTURE(what);
          Tensor a = uniform_f64(c.a, ++seed).to(dtype).to(device);
          if (c.a_cols) a = a.narrow(-1, 0, c.a_cols);
          if (c.transpose_01) a = a.transpose(0, 1);
          const Tensor b = uniform_f64(c.b, ++seed).to(dtype).to(device);
          const Tensor bias = uniform_f64({c.tb ? c.b[c.b.size() - 2] : c.b.back()}, ++seed).to(dtype).to(device);
          kernels::cuda::LaunchLog log;
          kernels::cuda::launch_log = &log;
          const Tensor out = matmul(a, b, c.ta, c.tb, bias);
          kernels::cuda::launch_log = nullptr;
          std::vector<std::string> names;
          for (const auto& e : log.entries) names.push_back(e.kernel);
          const bool epilogue = c.epilogue && dtype != DType::f64;
          CHECK(names == (epilogue ? std::vector<std::string>{} : std::vector<std::string>{"bias_rows_kernel"}));
          if (device.is_meta()) continue;  // nothing computed
          // The composition: out's rows start as the bias, the GEMM accumulates onto them (beta = 1).
          const Tensor composed = bias.expand(out.shape()).contiguous();
          matmul_into_(composed, a, b, c.ta, c.tb, true);
          if (dtype != DType::f32 || !epilogue) CHECK(bit_identical(out, composed));
          if (dtype == DType::f64) continue;
          // fl(acc + bias), acc the f32 sum of the GEMM that ran.
          const Tensor rows = epilogue && a.dim() > 2 ? a.reshape({-1, a.size(-1)}) : a;
          const Tensor acc = matmul(rows.to(DType::f32), b.to(DType::f32), c.ta, c.tb);
          const Tensor expected = binary(BinaryOp::Add, acc, bias.to(DType::f32)).to(dtype).reshape(out.shape());
          CHECK(bit_identical(out, expected));
        }
      }
    }
  }
}
#endif
