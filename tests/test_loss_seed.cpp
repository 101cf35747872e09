// The loss's seed taken as a host number (Op::accepts_host_seed): backward(loss, s) on a
// cross_entropy or linear_cross_entropy loss makes no seed tensor, and for s = 1 its rule hands
// its saved gradient on as it is. Checked here: every gradient bit-identical to the filled seed's
// (backward(loss, tensor), the path every other loss takes) for seeds 1, 0.37 and a loss scaler's
// 65536 / 3, every reduction, f32 and bf16, cpu and cuda; the saved gradient handed on is never
// written afterwards (a copy the pack hook kept stays unchanged through accumulation, zero_grad and
// a fan-out); a checkpointed loss, optim::Accumulator's windows; and the launches it saves.
#include <any>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/saved_tensor.h"
#include "autograd/tape.h"
#include "core/profile.h"
#include "optim/accumulator.h"
#include "optim/optimizer.h"
#include "testing.h"

using namespace reel;
using reel::testing::bit_identical;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, Device d, DType dtype = DType::f32) {
  return reel::testing::uniform_f64(shape, seed, -2.0, 2.0).to(dtype).to(d).set_requires_grad();
}

Tensor targets_of(const std::vector<int64_t>& t, Device d) {
  return from_vector(t, {static_cast<int64_t>(t.size())}).to(d);
}

// The two ways to seed a scalar loss: as a number (the host seed, where the op takes it) or as the
// tensor the tape filled before (what an explicit gradient still is).
void seed_backward(const Tensor& loss, double s, bool as_number) {
  if (as_number) autograd::backward(loss, s);
  else autograd::backward(loss, full(loss.shape(), s, loss.dtype(), loss.device()));
}

// h (N, C) @ W^T -> logits (N, V) -> cross_entropy; the gradients of h and W.
std::vector<Tensor> ce_grads(Device d, DType dtype, const std::string& reduction, double s, bool as_number,
                             int64_t n) {
  Tensor h = leaf({n, 3}, 1, d, dtype), w = leaf({5, 3}, 2, d, dtype);
  const std::vector<int64_t> t = {4, 0, -100, 2};
  const Tensor loss = cross_entropy(matmul(h, w, false, true), targets_of({t.begin(), t.begin() + n}, d), -100,
                                    reduction);
  seed_backward(loss, s, as_number);
  return {h.grad(), w.grad()};
}

bool all_bit_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!bit_identical(a[i], b[i])) return false;
  return true;
}

// Kernels run while `fn` does (every device's records).
std::vector<profile::KernelRecord> kernels_of(const std::function<void()>& fn) {
  Profiler prof;
  fn();
  prof.stop();
  return prof.kernels();
}

}  // namespace

TEST_CASE("a host seed gives cross_entropy's gradients bit for bit the filled seed's") {
  for (Device d : reel::testing::devices())
    for (DType dtype : {DType::f32, DType::bf16})
      for (const char* reduction : {"mean", "sum", "none"})
        for (double s : {1.0, 0.37, 65536.0 / 3}) {
          CAPTURE(d);
          CAPTURE(dtype);
          CAPTURE(reduction);
          CAPTURE(s);
          // "none" takes a host seed only for a loss of one element (backward(loss, s) is for scalars).
          const int64_t n = std::string(reduction) == "none" ? 1 : 4;
          const std::vector<Tensor> number = ce_grads(d, dtype, reduction, s, true, n);
          const std::vector<Tensor> tensor = ce_grads(d, dtype, reduction, s, false, n);
          CHECK(all_bit_identical(number, tensor));
        }
}

TEST_CASE("a loss scaler's seed still multiplies: 2^16 gives 2^16 times the gradients of 1") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const std::vector<Tensor> one = ce_grads(d, DType::f32, "sum", 1.0, true, 4);
    const std::vector<Tensor> scaled = ce_grads(d, DType::f32, "sum", 65536.0, true, 4);
    for (size_t i = 0; i < one.size(); ++i) CHECK(bit_identical(scaled[i], one[i] * 65536.0));  // a power of two: exact
  }
}

TEST_CASE("linear_cross_entropy takes the host seed too: the same gradients as the filled seed") {
  for (Device d : reel::testing::devices())
    for (double s : {1.0, 0.37}) {
      CAPTURE(d);
      CAPTURE(s);
      std::vector<Tensor> got[2];
      for (bool as_number : {true, false}) {
        Tensor h = leaf({4, 3}, 3, d), w = leaf({5, 3}, 4, d), b = leaf({5}, 5, d);
        const Tensor loss = linear_cross_entropy(h, w, targets_of({1, 4, -100, 0}, d), -100, "mean", 3, b);
        const std::vector<profile::KernelRecord> runs = kernels_of([&] { seed_backward(loss, s, as_number); });
        got[as_number] = {h.grad(), w.grad(), b.grad()};
        if (as_number && s == 1.0)  // the saves are the gradients: its rule launches nothing
          for (const profile::KernelRecord& r : runs) CHECK(!(r.op == "linear_cross_entropy" && r.op_backward));
      }
      CHECK(all_bit_identical(got[0], got[1]));
    }
}

// The saved dlogits handed on as the gradient for s = 1 is that node's own tensor: nothing may
// write into it afterwards. A pack hook keeps each saved tensor (as a user's inspection would) and
// a copy of its values at the save. The logits are a leaf, so the gradient goes straight to its
// .grad: the first backward makes the buffer (from a copy, never the gradient itself), the second
// adds into it in place, a zero_grad and a third write into the zeroed buffer; then a fan-out (the
// loss of y + y sums two gradients of y). Every kept save still holds its values, and every
// gradient is the filled seed's.
TEST_CASE("the saved gradient handed on for a seed of 1 is never written afterwards") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Tensor t = targets_of({4, 0, -100, 2}, d);
    auto run = [&](const Tensor& x, bool as_number) {
      std::vector<Tensor> grads;  // x.grad after each backward, copied
      for (int i = 0; i < 3; ++i) {
        if (i == 2) autograd::zero_grad({x});
        seed_backward(cross_entropy(x, t, -100, "sum"), 1.0, as_number);
        grads.push_back(x.grad().clone());
      }
      const Tensor y = x * 3.0;
      seed_backward(cross_entropy(y + y, t, -100, "sum"), 1.0, as_number);
      grads.push_back(x.grad().clone());
      return grads;
    };
    std::vector<Tensor> kept, at_save, number;
    {
      autograd::SavedTensorHooks hooks(
          [&](const Tensor& v) -> std::any {
            kept.push_back(v);
            at_save.push_back(v.clone());
            return v;
          },
          [](const std::any& packed) { return std::any_cast<Tensor>(packed); });
      number = run(leaf({4, 5}, 6, d), true);
    }
    REQUIRE(kept.size() == at_save.size());
    REQUIRE(kept.size() >= 4);  // the four losses' dlogits at least
    for (size_t i = 0; i < kept.size(); ++i) CHECK(bit_identical(kept[i], at_save[i]));
    CHECK(all_bit_identical(number, run(leaf({4, 5}, 6, d), false)));
  }
}

TEST_CASE("a checkpointed segment that holds the loss: the host seed's gradients are the plain ones") {
  for (Device d : reel::testing::devices())
    for (double s : {1.0, 0.37}) {
      CAPTURE(d);
      CAPTURE(s);
      std::vector<Tensor> got[3];
      for (int mode = 0; mode < 3; ++mode) {  // 0: plain, host seed; 1: checkpointed, host seed; 2: checkpointed, filled
        Tensor h = leaf({4, 3}, 7, d), w = leaf({5, 3}, 8, d);
        Tensor loss;
        {
          std::optional<autograd::Checkpoint> seg;
          if (mode > 0) seg.emplace();
          loss = cross_entropy(gelu(matmul(h, w, false, true)), targets_of({4, 0, -100, 2}, d));
        }
        seed_backward(loss, s, mode < 2);
        got[mode] = {h.grad(), w.grad()};
      }
      CHECK(all_bit_identical(got[0], got[1]));
      CHECK(all_bit_identical(got[1], got[2]));
    }
}

TEST_CASE("a backward run twice over one forward is refused, with a host seed as with a tensor") {
  Tensor x = leaf({2, 5}, 9, Device::cpu());
  const Tensor loss = cross_entropy(x, targets_of({1, 3}, Device::cpu()));
  autograd::backward(loss);
  CHECK_REEL_ERROR(autograd::backward(loss), "already cleared");
}

// optim::Accumulator seeds each micro-batch's backward with 1 / (the window's count), a number:
// its windows' gradients (seen by the hook) are bit for bit those of filled seeds.
TEST_CASE("optim::Accumulator's micro-batches accumulate the filled seed's gradients bit for bit") {
  using Batch = std::pair<Tensor, Tensor>;  // x (n, 3), targets (n)
  for (Device d : reel::testing::devices())
    for (bool host_decisions : {false, true}) {
      CAPTURE(d);
      CAPTURE(host_decisions);
      const std::vector<Batch> window = {
          {reel::testing::uniform_f64({3, 3}, 20).to(DType::f32).to(d), targets_of({1, 4, 0}, d)},
          {reel::testing::uniform_f64({2, 3}, 21).to(DType::f32).to(d), targets_of({2, -100}, d)},
          {reel::testing::uniform_f64({2, 3}, 22).to(DType::f32).to(d), targets_of({3, 3}, d)}};
      auto count = [](const Batch& b) {
        int64_t n = 0;
        for (double v : reel::testing::values(b.second)) n += v != -100;
        return n;
      };
      std::vector<Tensor> seen;
      {
        Tensor w = leaf({5, 3}, 10, d);
        optim::SGD sgd({w}, 0.1);
        optim::Accumulator acc(sgd, {0, nullptr, false, nullptr, nullptr, host_decisions});
        acc.set_grad_hook([&](const std::vector<Tensor>& ps, const optim::WindowResult&) {
          for (const Tensor& p : ps) seen.push_back(p.grad().clone());
        });
        for (int step = 0; step < 2; ++step)
          acc.step(window, count, [&](const Batch& b) { return cross_entropy(matmul(b.first, w, false, true), b.second, -100, "sum"); });
      }
      // The same two windows by hand, each backward seeded with a filled tensor.
      Tensor w = leaf({5, 3}, 10, d);
      optim::SGD sgd({w}, 0.1);
      REQUIRE(seen.size() == 2);
      for (int step = 0; step < 2; ++step) {
        int64_t total = 0;
        for (const Batch& b : window) total += count(b);
        for (const Batch& b : window)
          seed_backward(cross_entropy(matmul(b.first, w, false, true), b.second, -100, "sum"),
                        1.0 / static_cast<double>(total), false);
        CHECK(bit_identical(w.grad(), seen[static_cast<size_t>(step)]));
        sgd.step();
        sgd.zero_grad();
      }
    }
}

// The launches: the filled seed costs a fill and cross_entropy's backward a multiply by it; the
// number costs neither for s = 1 and the multiply alone (no fill) for another s. Counted on cuda
// (emulated or real) and on meta (which records cuda's launches).
TEST_CASE("launches: cross_entropy's backward from a seed of 1 runs no kernel, and no seed is filled") {
  std::vector<Device> devices = {Device::meta()};
  if (cuda_available()) devices.push_back(Device::cuda(0));
  for (Device d : devices)
    for (double s : {1.0, 0.37}) {
      CAPTURE(d);
      CAPTURE(s);
      std::vector<profile::KernelRecord> runs[2];
      for (bool as_number : {false, true}) {
        Tensor h = leaf({4, 3}, 11, d), w = leaf({5, 3}, 12, d);
        const Tensor loss = cross_entropy(matmul(h, w, false, true), targets_of({4, 0, -100, 2}, d));
        runs[as_number] = kernels_of([&] { seed_backward(loss, s, as_number); });
      }
      auto count = [](const std::vector<profile::KernelRecord>& rs, const std::string& what) {
        int n = 0;
        for (const profile::KernelRecord& r : rs) n += (r.kernel == what) || (r.op == what && r.op_backward);
        return n;
      };
      CHECK(count(runs[false], "cross_entropy") == 1);  // the multiply by the filled seed
      CHECK(count(runs[true], "cross_entropy") == (s == 1.0 ? 0 : 1));
      CHECK(count(runs[true], "fill") == 0);
      CHECK(runs[false].size() - runs[true].size() == (s == 1.0 ? 2u : 1u));  // the fill, and the multiply for 1
    }
}
