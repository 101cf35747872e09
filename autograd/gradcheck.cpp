// Gradient check by central finite differences (see gradcheck.h).
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/tape.h"
#include "core/random.h"

namespace reel::autograd {

namespace {
// sum(w * y) on the host, in f64.
double projected(const Tensor& y, const std::vector<double>& w) {
  const std::vector<double> v = y.to(Device::cpu()).to(DType::f64).to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const Tensors&)>& f, const Tensors& inputs,
                          const GradcheckOptions& options) {
  REEL_CHECK(Tape::current().empty(), "gradcheck: the tape already holds ", Tape::current().size(),
             " nodes; run it outside a forward pass");
  bool any_requires_grad = false;
  for (const Tensor& t : inputs) any_requires_grad = any_requires_grad || t.requires_grad();
  Tensors x;
  std::vector<bool> checked;
  for (const Tensor& t : inputs) {
    x.push_back(t.detach().to(Device::cpu()).to(DType::f64).clone());
    checked.push_back(!any_requires_grad || t.requires_grad());
    x.back().set_requires_grad(checked.back());
  }

  // Analytic: backward of y with gradient w, i.e. of sum(w * y).
  const Tensor y = f(x);
  REEL_CHECK(y.defined() && y.dtype() == DType::f64 && y.device().is_cpu(),
             "gradcheck: f must return an f64 CPU tensor for f64 CPU inputs");
  Generator gen(options.seed);
  const Tensor w = randn(y.shape(), DType::f64, Device::cpu(), &gen);
  const std::vector<double> wv = w.to_vector<double>();
  if (y.requires_grad()) backward(y, w);

  GradcheckResult result;
  double worst_failing = 0;
  NoGrad no_grad;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!checked[i]) continue;
    const std::vector<double> analytic =
        x[i].grad().defined() ? x[i].grad().to_vector<double>() : std::vector<double>(x[i].numel(), 0.0);
    double* data = x[i].data<double>();
    for (int64_t e = 0; e < x[i].numel(); ++e) {
      const double original = data[e];
      data[e] = original + options.eps;
      const double plus = projected(f(x), wv);
      data[e] = original - options.eps;
      const double minus = projected(f(x), wv);
      data[e] = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double error = std::fabs(analytic[e] - numeric);
      const bool ok = error <= options.atol + options.rtol * std::fabs(numeric);
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (!ok && error >= worst_failing) {  // report the worst failing element
        worst_failing = error;
        std::ostringstream os;
        os << "gradcheck: input " << i << " " << shape_str(x[i].shape()) << ", element " << e << ": analytic "
           << analytic[e] << " vs numeric " << numeric << " (error " << error << " > " << options.atol << " + "
           << options.rtol << " * |numeric|)";
        result.message = os.str();
      }
      result.ok = result.ok && ok;
    }
  }
  return result;
}

}  // namespace reel::autograd
