// tests/op_table/tensor.cpp: the op table's tensor-level device ops: fills, strided copies (up to
// 10-d permutes, copy_ into views and across devices), all 16 dtype casts, rand and randn (the same
// Philox streams on every device). Their rows run in the dtypes they name (every dtype).
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (the rows here name their own): one entry to add.
const std::vector<DType> kDTypes = {DType::f32, DType::f64};

// ==== fills, copies, casts, random numbers, dropout masks =========================================

std::vector<OpCase> fill_copy_cast_cases() {
  using namespace kernels;
  const std::vector<DType> all = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64};
  std::vector<OpCase> cases;
  auto none = [](Generator&) { return Tensors{}; };
  auto normal_x100 = [](const Shape& s) {  // N(0, 1), times 100 for integer dtypes (then truncated)
    return [s](Generator& g) { return Tensors{normal_f64(g, s)}; };
  };
  for (DType dt : all) {
    for (const Shape& s : std::vector<Shape>{{1}, {257}, {31, 33}, {}})
      cases.push_back(OpCase(std::string("full ") + shape_str(s) + " " + dtype_name(dt), none,
                             [s, dt](const Tensors&, Device d) { return Tensors{full(s, -3.25, dt, d)}; }, {kExact})
                          .with_dtypes({}));
    auto as = [dt](const Tensor& x) { return is_floating(dt) ? x.to(dt) : binary(BinaryOp::Mul, x, 100.0).to(dt); };
    cases.push_back(OpCase(std::string("fill_ of (9, 31).t()[::2] ") + dtype_name(dt), normal_x100({9, 31}),
                           [as](const Tensors& in, Device d) {
                             Tensor x = as(in[0]).to(d).clone();
                             x.t().slice(0, 0, 31, 2).fill_(7.0);
                             return Tensors{x};
                           },
                           {kExact})
                        .with_dtypes({}));
    struct Copy {
      const char* name;
      Shape shape;
      std::function<Tensor(const Tensor&)> run;
    };
    const std::vector<Copy> copies = {
        {"(4, 5, 6).permute(2, 0, 1).contiguous()", {4, 5, 6}, [](const Tensor& x) { return x.permute({2, 0, 1}).contiguous(); }},
        {"(33, 31).t().contiguous()", {33, 31}, [](const Tensor& x) { return x.t().contiguous(); }},
        {"(257)[3::5].contiguous()", {257}, [](const Tensor& x) { return x.slice(0, 3, 257, 5).contiguous(); }},
        {"(1, 31).expand(7, 31).contiguous()", {1, 31}, [](const Tensor& x) { return x.expand({7, 31}).contiguous(); }},
        {"(6, 7, 8).select(1, 3).contiguous()", {6, 7, 8}, [](const Tensor& x) { return x.select(1, 3).contiguous(); }},
        {"9-d (2, ..., 2) reversed permute .contiguous()", Shape(9, 2),
         [](const Tensor& x) { return x.permute({8, 7, 6, 5, 4, 3, 2, 1, 0}).contiguous(); }},
        {"10-d (3, 2, ..., 2) odd permute .contiguous()", {3, 2, 2, 2, 2, 2, 2, 2, 2, 2},
         [](const Tensor& x) { return x.permute({9, 0, 8, 1, 7, 2, 6, 3, 5, 4}).contiguous(); }},
        {"copy_ into (31, 33).t()", {33, 31},
         [](const Tensor& x) {
           Tensor y = zeros({31, 33}, x.dtype(), x.device());
           y.t().copy_(x);
           return y;
         }},
        {"copy_ from the cpu into a device view", {5, 31},
         [](const Tensor& x) {
           Tensor y = zeros({31, 10}, x.dtype(), x.device());
           y.slice(1, 0, 10, 2).t().copy_(x.to(Device::cpu()));
           return y;
         }},
    };
    for (const Copy& c : copies)
      cases.push_back(OpCase(std::string(c.name) + " " + dtype_name(dt), normal_x100(c.shape),
                             [as, f = c.run](const Tensors& in, Device d) { return Tensors{f(as(in[0]).to(d))}; },
                             {kExact})
                          .with_dtypes({}));
  }
  // Casts, all 36 pairs; fractional values: float -> int truncates toward zero on every device; to
  // bf16 and f16 rounds to nearest even, the same bits on every device (tests/test_half.cpp checks the bits).
  for (DType from : all)
    for (DType to : all)
      for (bool strided : {false, true})
        cases.push_back(
            OpCase(std::string(dtype_name(from)) + " -> " + dtype_name(to) + (strided ? " of (33, 31).t()" : " of (257)"),
                   normal_x100(strided ? Shape{33, 31} : Shape{257}),
                   [from, to, strided](const Tensors& in, Device d) {
                     const Tensor x = binary(BinaryOp::Mul, in[0], is_floating(from) ? 7.3 : 100.0).to(from).to(d);
                     return Tensors{(strided ? x.t() : x).to(to)};
                   },
                   {kExact})
                .with_dtypes({}));
  // rand and randn: the same Philox streams on every device; uniform bit for bit, normal to rounding.
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& s : std::vector<Shape>{{1}, {3}, {5}, {257}, {31, 33}}) {
      cases.push_back(OpCase(std::string("rand ") + shape_str(s) + " " + dtype_name(dt), none,
                             [s, dt](const Tensors&, Device d) {
                               Generator g(42);
                               g.next_offset();  // a stream id other than 0
                               return Tensors{rand(s, dt, d, &g)};
                             },
                             {kExact})
                          .with_dtypes({}));
      cases.push_back(OpCase(std::string("randn ") + shape_str(s) + " " + dtype_name(dt), none,
                             [s, dt](const Tensors&, Device d) {
                               Generator g(43);
                               return Tensors{randn(s, dt, d, &g)};
                             },
                             {tols(1e-6, 1e-13)})
                          .with_dtypes({}));
    }
  return cases;
}
TEST_CASE("fills, strided copies, dtype casts, rand and randn: every dtype") { run_cases(fill_copy_cast_cases(), kDTypes); }
}  // namespace
}  // namespace reel::op_table
