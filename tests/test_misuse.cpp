// The misuse table: one row per way an outside user broke reel (issue 14), the call and the
// fragment its reel::Error must contain. Each was silent, wrong or fatal once; the unit files
// hold the detailed tests, this table is the list that keeps all of them honest together.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;

namespace {

struct Misuse {
  const char* what;
  std::function<void()> call;
  const char* fragment;
};

Tensor param(Shape shape) {
  Tensor t = ones(std::move(shape));
  t.set_requires_grad();
  return t;
}

std::vector<Misuse> misuses() {
  return {
      // ---- shapes and sizes ----
      {"a shape whose element count overflows", [] { zeros({1LL << 32, 1LL << 32}); }, "is too large"},
      {"a shape whose numel would be negative", [] { empty({3037000500, 3037000500}); }, "is too large"},
      {"a negative size in expand", [] { ones({1, 3}).expand({-2, 3}); }, "expand: invalid size -2"},
      {"narrow past the end", [] { ones({4}).narrow(0, 2, INT64_MAX); }, "narrow"},
      {"arange to NaN", [] { arange(0.0, std::nan(""), 1.0); }, "arange"},
      {"arange to infinity", [] { arange(0.0, INFINITY, 1.0); }, "arange"},
      // ---- parsers ----
      {"a safetensors header nested 100000 deep",
       [] {
         const std::string header = "{\"w\":{\"dtype\":" + std::string(100000, '[') + std::string(100000, ']') + "}}";
         std::string bytes(8, '\0');
         for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
         nn::from_safetensors_bytes(bytes + header);
       },
       "nests deeper than 64 levels"},
      {"loading weights from a directory", [] { nn::load_safetensors("."); }, "is a directory"},
      // ---- optimizer, window, module, checkpoints ----
      {"set_lr(NaN)", [] { optim::SGD({param({2})}, 0.1).set_lr(std::nan("")); }, "lr (nan) must be a finite number"},
      {"a negative learning rate", [] { optim::SGD({param({2})}, 0.1).set_lr(-1); }, "lr (-1) must be a finite number"},
      {"one parameter listed twice",
       [] {
         const Tensor w = param({3});
         optim::AdamW({w, w}, 0.1);
       },
       "are the same tensor"},
      {"a negative count in the accumulation window",
       [] {
         const Tensor w = param({2});
         optim::SGD opt({w}, 0.1);
         optim::Accumulator acc(opt);
         acc.step<int>({1, -5}, [](int n) { return int64_t{n}; }, [&](int) { return sum(w); });
       },
       "micro-batch 1 has a count of -5"},
      {"checkpoint scopes closed out of order",
       [] {
         autograd::Tape::current().clear();
         std::optional<autograd::Checkpoint> outer(std::in_place), inner(std::in_place);
         const auto clear_after = [] { autograd::Tape::current().clear(); };
         try {
           outer->close();
         } catch (...) {
           inner.reset();
           clear_after();
           throw;
         }
       },
       "opened inside it, is still open"},
      {"batched matmul with batch dims that do not broadcast",
       [] { matmul(zeros({2, 2, 3}), zeros({3, 3, 2})); }, "batch dims (2) and (3) cannot be broadcast"},
      // ---- in-place writes to what backward needs ----
      {"an input overwritten between forward and backward",
       [] {
         const Tensor x = param({3}), w = param({3});
         const Tensor loss = sum(mul(x, w));
         autograd::NoGrad no_grad;
         x.fill_(2.0);
         autograd::backward(loss);
       },
       "modified in place (version 0 when saved, 1 now)"},
      // ---- NaN and Inf, found where they are made ----
      {"a NaN made by an op, under DetectAnomaly",
       [] {
         autograd::DetectAnomaly detect;
         const Tensor x = param({2}) * -1.0;
         const auto clear_after = [] { autograd::Tape::current().clear(); };
         try {
           log(x);
         } catch (...) {
           clear_after();
           throw;
         }
       },
       "non-finite values (NaN or Inf) in forward"},
      // ---- the profiler ----
      {"two profilers at once",
       [] {
         Profiler first;
         Profiler second;
       },
       "another Profiler is collecting"},
  };
}

}  // namespace

TEST_CASE("the misuse table: every row raises a reel::Error with its message, and nothing crashes") {
  for (const Misuse& m : misuses()) {
    CAPTURE(m.what);
    CHECK_REEL_ERROR(m.call(), m.fragment);
  }
  // Every row left the thread usable: a forward and backward still work.
  const Tensor w = param({3});
  autograd::backward(sum(w * 2.0));
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
}
