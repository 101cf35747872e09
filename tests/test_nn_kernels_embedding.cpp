// Embedding, the edge cases: a scalar id and no ids, unused ids give exactly zero gradient rows,
// repeated ids bit-identical across runs and OpenMP thread counts (and equal to a serial sum in
// position order), out-of-range ids and bad shapes. (The gather and the scatter-add against an f64
// reference and finite differences, for i32 and i64 ids, on every device, are rows of
// tests/op_table/embedding.cpp.) bf16 / f16 tables: the gather copies bits, the backward sums wide.
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/profile.h"
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

TEST_CASE("embedding of a scalar id and of no ids; unused ids get exactly zero gradient rows") {
  const int64_t V = 6, C = 4;
  Tensor table = uniform_f64({V, C}, 1);
  CHECK(embedding_forward(from_vector<int64_t>({4}, {}), table).shape() == Shape{C});
  CHECK(embedding_forward(from_vector<int64_t>({}, {0}), table).shape() == Shape{0, C});
  Tensor ids = from_vector<int64_t>({1, 4, 1, 1, 0, 4, 2}, {7});  // id 3 and 5 unused: zero rows
  const std::vector<double> d = values(embedding_backward(uniform_f64({7, C}, 3), ids, V));
  for (int64_t c = 0; c < C; ++c) {
    CHECK(d[3 * C + c] == 0.0);
    CHECK(d[5 * C + c] == 0.0);
  }
  // No ids at all: an all-zero table gradient.
  for (double v : values(embedding_backward(zeros({0, C}), from_vector<int32_t>({}, {0}), V))) CHECK(v == 0.0);
}

TEST_CASE("embedding backward with repeated ids is bit-identical across runs and thread counts") {
  // 20000 positions over 37 ids: each table row sums ~540 f32 rows, where any change of order
  // changes the rounding. Id 0 is hot (a quarter of the positions), as padding would be.
  const int64_t N = 20000, V = 37, C = 48;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = n % 4 == 0 ? 0 : static_cast<int32_t>((n * 7919) % V);
  Tensor idt = from_vector<int32_t>(ids, {4, N / 4});
  Tensor dout = uniform_f64({4, N / 4, C}, 4).to(DType::f32);
  // The promised order: positions in increasing order, added in f32.
  const std::vector<float> dv = dout.to_vector<float>();
  std::vector<float> serial(V * C, 0.0f);
  std::vector<bool> seen(V, false);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      float& acc = serial[ids[n] * C + c];
      acc = seen[ids[n]] ? acc + dv[n * C + c] : dv[n * C + c];
      if (c == C - 1) seen[ids[n]] = true;
    }
  std::vector<Tensor> runs;
  for_thread_counts({1, 2, 3, 8, 2}, [&] { runs.push_back(embedding_backward(dout, idt, V)); });
  CHECK(runs[0].to_vector<float>() == serial);
  for (const Tensor& r : runs) CHECK(bit_identical(r, runs[0]));
}

TEST_CASE("the tape's embedding backward does not check the ids its forward checked; a direct call does") {
  for (Device d : devices()) {
    CAPTURE(d);
    const Tensor ids = from_vector<int64_t>({3, 0, 3, 5, 1}, {5}).to(d);
    const Tensor dout = uniform_f64({5, 4}, 2).to(d);
    // Vouched-for ids give the checked call's result, bit for bit.
    CHECK(bit_identical(embedding_backward(dout, ids, 6, /*ids_checked=*/true), embedding_backward(dout, ids, 6)));
    // Through the tape: the backward runs its one kernel and nothing else (no error buffer filled
    // or copied back on cuda, no host loop on the cpu, which records nothing either way).
    Tensor table = uniform_f64({6, 4}, 1).to(d);
    table.set_requires_grad(true);
    const Tensor y = embedding(ids, table);
    Profiler prof;
    autograd::backward(y, dout);
    prof.stop();
    std::vector<std::string> backward_kernels;
    for (const profile::KernelRecord& k : prof.kernels())
      if (k.op == "embedding") backward_kernels.push_back(k.kernel);
    CHECK(backward_kernels == std::vector<std::string>{"embedding_backward"});
    CHECK(bit_identical(table.grad(), embedding_backward(dout, ids, 6)));
  }
}

TEST_CASE("bf16 and f16 tables: the gather copies bits; repeated ids sum in f32, rounded once") {
  for (Device d : devices())
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(dt);
      const Tensor table = uniform_f64({5, 3}, 1).to(dt).to(d);
      const Tensor ids = from_vector<int64_t>({4, 0, 4}, {3}).to(d);
      const Tensor y = embedding_forward(ids, table);
      CHECK(y.dtype() == dt);
      CHECK(bit_identical(y.narrow(0, 0, 1), table.narrow(0, 4, 1)));
      // 300 rows of 1 into id 2: 300 exactly, where a 16-bit running sum stops at 256 (bf16).
      const Tensor dt_ = embedding_backward(ones({300, 3}, dt, d), from_vector<int32_t>(std::vector<int32_t>(300, 2), {300}).to(d), 5);
      CHECK(dt_.dtype() == dt);
      CHECK(values(dt_) == std::vector<double>{0, 0, 0, 0, 0, 0, 300, 300, 300, 0, 0, 0, 0, 0, 0});
    }
}

TEST_CASE("bad embedding inputs raise reel::Error naming the id and its position") {
  Tensor table = zeros({10, 3});
  CHECK_REEL_ERROR(embedding_forward(from_vector<int64_t>({1, 2, 3, 10}, {2, 2}), table),
                   "embedding_forward: id 10 at position (1, 1) of (2, 2) is out of range [0, 10) of the table's rows");
  CHECK_REEL_ERROR(embedding_forward(from_vector<int32_t>({-1}, {1}), table),
                   "embedding_forward: id -1 at position (0) of (1) is out of range [0, 10)");
  CHECK_REEL_ERROR(embedding_forward(zeros({2}), table),
                   "embedding_forward: ids (2) have dtype f32; integer indices (i32 or i64) expected");
  CHECK_REEL_ERROR(embedding_forward(from_vector<int64_t>({1}, {1}), zeros({10})),
                   "embedding_forward: table (10) must be 2-D (num_embeddings, dim)");
  CHECK_REEL_ERROR(embedding_backward(zeros({2, 3}), from_vector<int64_t>({1, 12}, {2}), 10),
                   "embedding_backward: id 12 at position (1) of (2) is out of range [0, 10)");
  CHECK_REEL_ERROR(embedding_backward(zeros({3, 3}), from_vector<int64_t>({1, 2}, {2}), 10),
                   "embedding_backward: dout (3, 3) does not match ids (2): (ids..., dim) expected");
}
