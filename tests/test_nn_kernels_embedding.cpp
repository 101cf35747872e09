// Embedding: forward gather against a reference, backward scatter-add against a reference and
// finite differences in f64, repeated ids bit-identical across runs and OpenMP thread counts (and
// equal to a serial sum in position order), out-of-range ids and bad shapes.
#include "kernels/nn_ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

TEST_CASE("embedding forward gathers rows for i32 and i64 ids of any rank") {
  const int64_t V = 7, C = 5;
  Tensor table = uniform_f64({V, C}, 1);
  const std::vector<double> tv = values(table);
  const std::vector<int64_t> ids = {3, 0, 6, 3, 1, 3};
  for (DType dt : {DType::f32, DType::f64})
    for (DType it : {DType::i32, DType::i64}) {
      Tensor idt = it == DType::i64 ? from_vector<int64_t>(ids, {2, 3})  // (B, T)
                                    : from_vector<int32_t>(std::vector<int32_t>(ids.begin(), ids.end()), {2, 3});
      Tensor out = embedding_forward(idt, table.to(dt));
      CHECK(out.shape() == Shape{2, 3, C});
      std::vector<double> ref;
      for (int64_t id : ids)
        for (int64_t c = 0; c < C; ++c) ref.push_back(tv[id * C + c]);
      check_close(out, ref, 1e-7, 1e-7);
    }
  Tensor scalar_id = from_vector<int64_t>({4}, {});
  CHECK(embedding_forward(scalar_id, table).shape() == Shape{C});
  CHECK(embedding_forward(from_vector<int64_t>({}, {0}), table).shape() == Shape{0, C});
}

TEST_CASE("embedding backward adds repeated ids and matches finite differences in f64") {
  const int64_t V = 6, C = 4;
  Tensor table = uniform_f64({V, C}, 2);
  Tensor ids = from_vector<int64_t>({1, 4, 1, 1, 0, 4, 2}, {7});  // id 3 and 5 unused: zero rows
  Tensor wy = uniform_f64({7, C}, 3);
  Tensor dtable = embedding_backward(wy, ids, V);
  CHECK(dtable.shape() == Shape{V, C});
  check_gradient("dtable", table, dtable, [&] { return weighted_sum(embedding_forward(ids, table), wy); });
  const std::vector<double> d = values(dtable);
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
