// Entry points of the neural-network kernel families (kernels/nn_ops.h): validation of shapes,
// dtypes and devices (reel::Error naming the op and them), contiguous inputs, output allocation,
// then the device kernel: kernels/cpu or kernels/cuda (REEL_DEVICE_DISPATCH), behind the same
// signatures (validated inputs, preallocated contiguous outputs).
//
// Index tensors (token ids, targets, argmax indices): a kernel must never read out of bounds.
// On the CPU every index is range-checked here, on the host, before any kernel runs (an error
// cannot leave an OpenMP region). A CUDA device cannot be read from the host without a copy, so
// there the kernels check each index they read, skip a bad one and report its position through
// a device error buffer; the launcher throws cuda::IndexOutOfRange, which run_indexed() turns
// into the very message the CPU check gives. Cross-entropy needs the count of non-ignored
// targets before its kernel (the mean's divisor): on CUDA check_range() runs cuda::check_indices.
#include "kernels/nn_ops.h"

#include <cmath>
#include <sstream>

#include "kernels/cpu/nn_kernels.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/nn_kernels.h"
#endif
#include "kernels/dispatch.h"

namespace reel::kernels {

namespace {

void check_index_dtype(const char* op, const char* what, const Tensor& t) {
  REEL_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, op, ": ", what, " ", t.shape(), " have dtype ",
             t.dtype(), "; integer indices (i32 or i64) expected");
}

// The leading dims of a (..., C) shape: the rows.
Shape rows_of(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

Shape with_last(Shape s, int64_t last) {
  s.push_back(last);
  return s;
}

// "(1, 3)": the multi-index of flat position `flat` in `shape` ("()" for a scalar).
std::string position_str(const Shape& shape, int64_t flat) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return shape_str(idx);
}

// What the values of an index tensor index: valid values are in [0, limit) or equal `ignore`
// (when set). `what` names one value ("id"), `what_limit` the range ("of the table's rows").
struct IndexRange {
  const char* op;
  const char* what;
  int64_t limit;
  std::optional<int64_t> ignore;
  const char* what_limit;
};

// reel::Error naming the bad value `v`, its position `flat` in an index tensor of `shape`, and
// the range: the same message on every device.
[[noreturn]] void fail_out_of_range(const IndexRange& r, const Shape& shape, int64_t flat, int64_t v) {
  std::ostringstream os;
  os << r.op << ": " << r.what << " " << v << " at position " << position_str(shape, flat) << " of "
     << shape_str(shape) << " is out of range [0, " << r.limit << ") " << r.what_limit;
  if (r.ignore) os << " and is not ignore_index (" << *r.ignore << ")";
  REEL_FAIL(os.str());
}

template <typename I>
int64_t check_range_typed(const IndexRange& r, const Tensor& idx) {
  const I* p = idx.data<I>();
  const int64_t n = idx.numel();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(p[i]);
    if (r.ignore && v == *r.ignore) continue;
    if (v < 0 || v >= r.limit) fail_out_of_range(r, idx.shape(), i, v);
    ++count;
  }
  return count;
}

// Every index of the contiguous tensor `idx` is in range (reel::Error naming the first that is
// not, its position and the range); returns how many are not ignored. CPU: a host loop; CUDA: a
// kernel (cuda::check_indices) and one small copy back.
int64_t check_range(const IndexRange& r, const Tensor& idx) {
  if (idx.numel() == 0) return 0;
#if defined(REEL_HAS_CUDA_BACKEND)
  if (!idx.device().is_cpu()) {
    try {
      return cuda::check_indices(idx.view({idx.numel()}), r.limit, r.ignore.has_value(), r.ignore.value_or(0));
    } catch (const cuda::IndexOutOfRange& e) {
      fail_out_of_range(r, idx.shape(), e.position, e.value);
    }
  }
#endif
  return idx.dtype() == DType::i32 ? check_range_typed<int32_t>(r, idx) : check_range_typed<int64_t>(r, idx);
}

// The host check of an entry point whose kernel reads the indices: always on the CPU; on CUDA
// only when no kernel will run (an empty output), since a CUDA kernel checks what it reads.
void check_range_before(const IndexRange& r, const Tensor& idx, bool kernel_runs) {
  if (idx.device().is_cpu() || !kernel_runs) check_range(r, idx);
}

// Runs fn, a kernel call that reads index tensor `idx` of `shape`: a bad index that a CUDA kernel
// reported (cuda::IndexOutOfRange) raises the CPU check's message.
template <typename Fn>
void run_indexed(const IndexRange& r, const Shape& shape, Fn&& fn) {
#if defined(REEL_HAS_CUDA_BACKEND)
  try {
    fn();
  } catch (const cuda::IndexOutOfRange& e) {
    fail_out_of_range(r, shape, e.position, e.value);
  }
#else
  (void)r;
  (void)shape;
  fn();
#endif
}

// Views a contiguous (..., C) tensor as (R, C).
Tensor as_rows(const Tensor& t, int64_t R, int64_t C) { return t.view({R, C}); }

void check_norm_shapes(const char* op, const Tensor& x, const Tensor& w, const Tensor* b) {
  REEL_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x ", x.shape(), " needs a non-empty last dim to normalise");
  const int64_t C = x.size(-1);
  REEL_CHECK(w.shape() == Shape{C}, op, ": weight ", w.shape(), " does not match x ", x.shape(), ": (", C,
             ") expected");
  if (b)
    REEL_CHECK(b->shape() == Shape{C}, op, ": bias ", b->shape(), " does not match x ", x.shape(), ": (", C,
               ") expected");
}

void check_rows_stat(const char* op, const char* what, const Tensor& stat, const Tensor& x) {
  REEL_CHECK(stat.shape() == rows_of(x.shape()), op, ": ", what, " ", stat.shape(), " does not match x ", x.shape(),
             ": ", rows_of(x.shape()), " expected (one value per row)");
}

}  // namespace

// ---- LayerNorm / RMSNorm ------------------------------------------------------------------------

LayerNormForward layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const char* op = "layernorm_forward";
  check_same_device(op, {&x, &w, &b});
  check_same_floating_dtype(op, {&x, &w, &b});
  check_norm_shapes(op, x, w, &b);
  const int64_t C = x.size(-1), R = x.numel() / C;
  LayerNormForward r{empty(x.shape(), x.dtype(), x.device()), empty(rows_of(x.shape()), x.dtype(), x.device()),
                     empty(rows_of(x.shape()), x.dtype(), x.device())};
  if (R > 0)
    REEL_DEVICE_DISPATCH(x.device(), layernorm_forward, as_rows(x.contiguous(), R, C), w.contiguous(), b.contiguous(),
                         eps, as_rows(r.y, R, C), r.mean.view({R}), r.rstd.view({R}));
  return r;
}

LayerNormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd) {
  const char* op = "layernorm_backward";
  check_same_device(op, {&dy, &x, &w, &mean, &rstd});
  check_same_floating_dtype(op, {&dy, &x, &w, &mean, &rstd});
  check_norm_shapes(op, x, w, nullptr);
  REEL_CHECK(dy.shape() == x.shape(), op, ": dy ", dy.shape(), " and x ", x.shape(), " differ in shape");
  check_rows_stat(op, "mean", mean, x);
  check_rows_stat(op, "rstd", rstd, x);
  const int64_t C = x.size(-1), R = x.numel() / C;
  LayerNormBackward r{empty(x.shape(), x.dtype(), x.device()), zeros({C}, x.dtype(), x.device()),
                      zeros({C}, x.dtype(), x.device())};
  if (R > 0)
    REEL_DEVICE_DISPATCH(x.device(), layernorm_backward, as_rows(dy.contiguous(), R, C), as_rows(x.contiguous(), R, C),
                         w.contiguous(), mean.contiguous().view({R}), rstd.contiguous().view({R}),
                         as_rows(r.dx, R, C), r.dw, r.db);
  return r;
}

RMSNormForward rmsnorm_forward(const Tensor& x, const Tensor& w, double eps) {
  const char* op = "rmsnorm_forward";
  check_same_device(op, {&x, &w});
  check_same_floating_dtype(op, {&x, &w});
  check_norm_shapes(op, x, w, nullptr);
  const int64_t C = x.size(-1), R = x.numel() / C;
  RMSNormForward r{empty(x.shape(), x.dtype(), x.device()), empty(rows_of(x.shape()), x.dtype(), x.device())};
  if (R > 0)
    REEL_DEVICE_DISPATCH(x.device(), rmsnorm_forward, as_rows(x.contiguous(), R, C), w.contiguous(), eps,
                         as_rows(r.y, R, C), r.rstd.view({R}));
  return r;
}

RMSNormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  check_same_device(op, {&dy, &x, &w, &rstd});
  check_same_floating_dtype(op, {&dy, &x, &w, &rstd});
  check_norm_shapes(op, x, w, nullptr);
  REEL_CHECK(dy.shape() == x.shape(), op, ": dy ", dy.shape(), " and x ", x.shape(), " differ in shape");
  check_rows_stat(op, "rstd", rstd, x);
  const int64_t C = x.size(-1), R = x.numel() / C;
  RMSNormBackward r{empty(x.shape(), x.dtype(), x.device()), zeros({C}, x.dtype(), x.device())};
  if (R > 0)
    REEL_DEVICE_DISPATCH(x.device(), rmsnorm_backward, as_rows(dy.contiguous(), R, C), as_rows(x.contiguous(), R, C),
                         w.contiguous(), rstd.contiguous().view({R}), as_rows(r.dx, R, C), r.dw);
  return r;
}

// ---- softmax / log-softmax ----------------------------------------------------------------------

namespace {
Tensor softmax_forward_any(const char* op, const Tensor& x, bool log) {
  check_same_floating_dtype(op, {&x});
  REEL_CHECK(x.dim() >= 1, op, ": x ", x.shape(), " needs at least one dim (softmax runs along the last)");
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  const int64_t C = x.size(-1);
  if (y.numel() > 0)
    REEL_DEVICE_DISPATCH(x.device(), softmax_forward, as_rows(x.contiguous(), x.numel() / C, C), log,
                         as_rows(y, x.numel() / C, C));
  return y;
}

Tensor softmax_backward_any(const char* op, const Tensor& dy, const Tensor& y, bool log) {
  check_same_device(op, {&dy, &y});
  check_same_floating_dtype(op, {&dy, &y});
  REEL_CHECK(dy.shape() == y.shape() && y.dim() >= 1, op, ": dy ", dy.shape(), " and y ", y.shape(),
             " must have one shape of at least one dim");
  Tensor dx = empty(y.shape(), y.dtype(), y.device());
  const int64_t C = y.size(-1);
  if (dx.numel() > 0)
    REEL_DEVICE_DISPATCH(y.device(), softmax_backward, as_rows(dy.contiguous(), y.numel() / C, C),
                         as_rows(y.contiguous(), y.numel() / C, C), log, as_rows(dx, y.numel() / C, C));
  return dx;
}
}  // namespace

Tensor softmax_forward(const Tensor& x) { return softmax_forward_any("softmax_forward", x, false); }
Tensor log_softmax_forward(const Tensor& x) { return softmax_forward_any("log_softmax_forward", x, true); }
Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_backward_any("softmax_backward", dy, y, false);
}
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_backward_any("log_softmax_backward", dy, y, true);
}

// ---- cross-entropy ------------------------------------------------------------------------------

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

Reduction parse_reduction(const std::string& name) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  REEL_FAIL("cross_entropy: reduction \"", name, "\" is not one of \"none\", \"mean\", \"sum\"");
}

namespace {
IndexRange target_range(const char* op, const Tensor& logits, int64_t ignore_index) {
  return {op, "target", logits.size(-1), ignore_index, "of the classes"};
}

// Shared checks of forward and backward; returns the number of non-ignored targets (on every
// device, before the kernel: the mean divides by it).
int64_t check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  check_same_device(op, {&logits, &targets});
  check_same_floating_dtype(op, {&logits});
  check_index_dtype(op, "targets", targets);
  REEL_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, op, ": logits ", logits.shape(),
             " need a non-empty last dim of classes");
  REEL_CHECK(targets.shape() == rows_of(logits.shape()), op, ": logits ", logits.shape(), " and targets ",
             targets.shape(), " do not match: targets of shape ", rows_of(logits.shape()),
             " expected (one class index per row, classes along the last dim)");
  return check_range(target_range(op, logits, ignore_index), targets.contiguous());
}
}  // namespace

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, Reduction reduction,
                                          int64_t ignore_index, std::optional<double> grad_scale) {
  const char* op = "cross_entropy_forward";
  CrossEntropyForward r;
  r.count = check_cross_entropy(op, logits, targets, ignore_index);
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  const Shape rows = rows_of(logits.shape());
  r.losses = empty(rows, logits.dtype(), logits.device());
  r.lse = empty(rows, logits.dtype(), logits.device());
  if (grad_scale) r.dlogits = empty(logits.shape(), logits.dtype(), logits.device());
  // Mean with every row ignored: loss 0 and gradient 0 (see nn_ops.h), never 0/0.
  const double row_scale =
      reduction == Reduction::Mean ? (r.count > 0 ? 1.0 / static_cast<double>(r.count) : 0.0) : 1.0;
  if (N > 0)
    run_indexed(target_range(op, logits, ignore_index), targets.shape(), [&] {
      REEL_DEVICE_DISPATCH(logits.device(), cross_entropy_forward, as_rows(logits.contiguous(), N, V),
                           targets.contiguous().view({N}), ignore_index, r.losses.view({N}), r.lse.view({N}),
                           grad_scale ? as_rows(r.dlogits, N, V) : Tensor(), grad_scale.value_or(0.0) * row_scale);
    });
  if (reduction == Reduction::None) {
    r.loss = r.losses;
  } else {
    // N doubles added in row order on the host: deterministic, and cheap next to the N x V pass.
    const std::vector<double> per_row = r.losses.to(DType::f64).contiguous().to_vector<double>();
    double total = 0;
    for (double l : per_row) total += l;
    r.loss = scalar_tensor(total * row_scale, logits.dtype(), logits.device());
  }
  return r;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              Reduction reduction, int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  check_same_device(op, {&dloss, &logits, &targets, &lse});
  check_same_floating_dtype(op, {&logits, &dloss, &lse});
  const int64_t count = check_cross_entropy(op, logits, targets, ignore_index);
  const Shape rows = rows_of(logits.shape());
  REEL_CHECK(lse.shape() == rows, op, ": lse ", lse.shape(), " does not match logits ", logits.shape(), ": ", rows,
             " expected");
  if (reduction == Reduction::None)
    REEL_CHECK(dloss.shape() == rows, op, ": dloss ", dloss.shape(),
               " with reduction \"none\" must have the rows' shape ", rows, " of logits ", logits.shape());
  else
    REEL_CHECK(dloss.numel() == 1, op, ": dloss ", dloss.shape(), " with reduction \"", reduction_name(reduction),
               "\" must be a single value");
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Tensor dlogits = empty(logits.shape(), logits.dtype(), logits.device());
  const double scale = reduction == Reduction::Mean ? (count > 0 ? 1.0 / static_cast<double>(count) : 0.0) : 1.0;
  if (N > 0)
    run_indexed(target_range(op, logits, ignore_index), targets.shape(), [&] {
      REEL_DEVICE_DISPATCH(logits.device(), cross_entropy_backward, dloss.contiguous().view({dloss.numel()}), scale,
                           as_rows(logits.contiguous(), N, V), targets.contiguous().view({N}),
                           lse.contiguous().view({N}), ignore_index, as_rows(dlogits, N, V));
    });
  return dlogits;
}

// ---- embedding ----------------------------------------------------------------------------------

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  const char* op = "embedding_forward";
  check_same_device(op, {&ids, &table});
  check_same_floating_dtype(op, {&table});
  check_index_dtype(op, "ids", ids);
  REEL_CHECK(table.dim() == 2, op, ": table ", table.shape(), " must be 2-D (num_embeddings, dim)");
  const Tensor idc = ids.contiguous();
  const int64_t V = table.size(0), C = table.size(1);
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool kernel_runs = idc.numel() * C > 0;
  check_range_before(range, idc, kernel_runs);
  Tensor out = empty(with_last(ids.shape(), C), table.dtype(), table.device());
  if (kernel_runs)
    run_indexed(range, ids.shape(), [&] {
      REEL_DEVICE_DISPATCH(table.device(), embedding_forward, idc.view({idc.numel()}), table.contiguous(),
                           as_rows(out, idc.numel(), C));
    });
  return out;
}

Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings) {
  const char* op = "embedding_backward";
  check_same_device(op, {&dout, &ids});
  check_same_floating_dtype(op, {&dout});
  check_index_dtype(op, "ids", ids);
  REEL_CHECK(num_embeddings >= 0, op, ": num_embeddings ", num_embeddings, " is negative");
  REEL_CHECK(dout.dim() == ids.dim() + 1 && rows_of(dout.shape()) == ids.shape(), op, ": dout ", dout.shape(),
             " does not match ids ", ids.shape(), ": (ids..., dim) expected");
  const Tensor idc = ids.contiguous();
  const int64_t V = num_embeddings, C = dout.size(-1), N = idc.numel();
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool kernel_runs = V * C > 0 && N > 0;
  check_range_before(range, idc, kernel_runs);
  Tensor dtable = empty({V, C}, dout.dtype(), dout.device());
  if (dtable.numel() == 0) return dtable;
  if (N == 0) {
    dtable.fill_(0.0);
    return dtable;
  }
  run_indexed(range, ids.shape(), [&] {
    REEL_DEVICE_DISPATCH(dout.device(), embedding_backward, as_rows(dout.contiguous(), N, C), idc.view({N}), dtable);
  });
  return dtable;
}

// ---- max with indices ---------------------------------------------------------------------------

namespace {
struct AxisSplit {
  int64_t outer = 1, axis_size = 1, inner = 1;
  Shape dropped, kept;  // the output shape without the axis / with it as size 1
};
AxisSplit split_axis(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[d];
    else if (d > axis) s.inner *= shape[d];
    else s.axis_size = shape[d];
    if (d != axis) s.dropped.push_back(shape[d]);
    s.kept.push_back(d == axis ? 1 : shape[d]);
  }
  return s;
}
}  // namespace

MaxWithIndices max_with_indices(const Tensor& x, int64_t axis, bool keepdim) {
  const char* op = "max_with_indices";
  check_same_floating_dtype(op, {&x});
  REEL_CHECK(x.dim() >= 1, op, ": x ", x.shape(), " needs at least one dim");
  axis = normalize_dim(axis, x.dim(), op);
  REEL_CHECK(x.size(axis) > 0, op, ": cannot take the max over the empty axis ", axis, " of shape ", x.shape());
  const AxisSplit s = split_axis(x.shape(), axis);
  const Shape& out_shape = keepdim ? s.kept : s.dropped;
  MaxWithIndices r{empty(out_shape, x.dtype(), x.device()), empty(out_shape, DType::i64, x.device())};
  if (r.values.numel() > 0)
    REEL_DEVICE_DISPATCH(x.device(), max_with_indices, x.contiguous().view({s.outer, s.axis_size, s.inner}),
                         r.values.view({s.outer, s.inner}), r.indices.view({s.outer, s.inner}));
  return r;
}

Tensor max_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape, int64_t axis) {
  const char* op = "max_backward";
  check_same_device(op, {&dy, &indices});
  check_same_floating_dtype(op, {&dy});
  REEL_CHECK(indices.dtype() == DType::i64, op, ": indices ", indices.shape(), " have dtype ", indices.dtype(),
             "; i64 expected (as max_with_indices returns)");
  REEL_CHECK(!input_shape.empty(), op, ": input shape () needs at least one dim");
  axis = normalize_dim(axis, static_cast<int64_t>(input_shape.size()), op);
  const AxisSplit s = split_axis(input_shape, axis);
  REEL_CHECK(dy.shape() == indices.shape() && (dy.shape() == s.dropped || dy.shape() == s.kept), op, ": dy ",
             dy.shape(), " and indices ", indices.shape(), " do not match input ", input_shape, " reduced along axis ",
             axis, ": ", s.dropped, " or ", s.kept, " expected");
  const Tensor idc = indices.contiguous();
  const IndexRange range{op, "index", s.axis_size, std::nullopt, "of the reduced axis"};
  const bool kernel_runs = shape_numel(input_shape) > 0;
  check_range_before(range, idc, kernel_runs);
  Tensor dx = empty(input_shape, dy.dtype(), dy.device());
  if (kernel_runs)
    run_indexed(range, indices.shape(), [&] {
      REEL_DEVICE_DISPATCH(dy.device(), max_backward, dy.contiguous().view({s.outer, s.inner}),
                           idc.view({s.outer, s.inner}), dx.view({s.outer, s.axis_size, s.inner}));
    });
  return dx;
}

// ---- attention ----------------------------------------------------------------------------------

namespace {
struct AttnDims {
  int64_t BH, Tq, Tk, D, Dv;
  Shape batch;  // the leading dims (B, H)
};

AttnDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  check_same_device(op, {&q, &k, &v});
  check_same_floating_dtype(op, {&q, &k, &v});
  REEL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": q ", q.shape(), ", k ", k.shape(),
             " and v ", v.shape(), " must have one rank of at least 2: (B, H, T, D)");
  AttnDims d;
  d.batch = Shape(q.shape().begin(), q.shape().end() - 2);
  const bool same_batch = Shape(k.shape().begin(), k.shape().end() - 2) == d.batch &&
                          Shape(v.shape().begin(), v.shape().end() - 2) == d.batch;
  d.Tq = q.size(-2), d.D = q.size(-1), d.Tk = k.size(-2), d.Dv = v.size(-1);
  REEL_CHECK(same_batch && k.size(-1) == d.D && v.size(-2) == d.Tk, op, ": q ", q.shape(), ", k ", k.shape(),
             " and v ", v.shape(), " do not match: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) expected");
  REEL_CHECK(!causal || d.Tq == d.Tk, op, ": causal attention needs as many queries as keys: q ", q.shape(), ", k ",
             k.shape());
  REEL_CHECK(d.D > 0 && d.Dv > 0 && (d.Tk > 0 || d.Tq == 0), op, ": q ", q.shape(), ", k ", k.shape(), " and v ",
             v.shape(), ": attention needs D > 0, Dv > 0 and at least one key");
  d.BH = shape_numel(d.batch);
  return d;
}

double attention_scale(const std::optional<double>& scale, int64_t D) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
}
}  // namespace

AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                                   bool causal) {
  const char* op = "attention_forward";
  const AttnDims d = check_attention(op, q, k, v, causal);
  AttentionForward r{empty(with_last(rows_of(q.shape()), d.Dv), q.dtype(), q.device()),
                     empty(rows_of(q.shape()), q.dtype(), q.device())};
  if (d.BH * d.Tq > 0)
    REEL_DEVICE_DISPATCH(q.device(), attention_forward, q.contiguous().view({d.BH, d.Tq, d.D}),
                         k.contiguous().view({d.BH, d.Tk, d.D}), v.contiguous().view({d.BH, d.Tk, d.Dv}),
                         attention_scale(scale, d.D), causal, r.out.view({d.BH, d.Tq, d.Dv}),
                         r.lse.view({d.BH, d.Tq}));
  return r;
}

AttentionBackward attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, std::optional<double> scale,
                                     bool causal) {
  const char* op = "attention_backward";
  const AttnDims d = check_attention(op, q, k, v, causal);
  check_same_device(op, {&q, &dout, &out, &lse});
  check_same_floating_dtype(op, {&q, &dout, &out, &lse});
  const Shape out_shape = with_last(rows_of(q.shape()), d.Dv);
  REEL_CHECK(dout.shape() == out_shape && out.shape() == out_shape && lse.shape() == rows_of(q.shape()), op,
             ": dout ", dout.shape(), ", out ", out.shape(), " and lse ", lse.shape(), " do not match q ", q.shape(),
             " and v ", v.shape(), ": ", out_shape, ", ", out_shape, " and ", rows_of(q.shape()), " expected");
  AttentionBackward r{empty(q.shape(), q.dtype(), q.device()), empty(k.shape(), k.dtype(), k.device()),
                      empty(v.shape(), v.dtype(), v.device())};
  if (d.BH == 0 || d.Tk == 0) return r;
  if (d.Tq == 0) {  // no query reads any key: zero gradients
    r.dk.fill_(0.0);
    r.dv.fill_(0.0);
    return r;
  }
  REEL_DEVICE_DISPATCH(q.device(), attention_backward, dout.contiguous().view({d.BH, d.Tq, d.Dv}),
                       q.contiguous().view({d.BH, d.Tq, d.D}), k.contiguous().view({d.BH, d.Tk, d.D}),
                       v.contiguous().view({d.BH, d.Tk, d.Dv}), out.contiguous().view({d.BH, d.Tq, d.Dv}),
                       lse.contiguous().view({d.BH, d.Tq}), attention_scale(scale, d.D), causal,
                       r.dq.view({d.BH, d.Tq, d.D}), r.dk.view({d.BH, d.Tk, d.D}), r.dv.view({d.BH, d.Tk, d.Dv}));
  return r;
}

// ---- optimizer updates --------------------------------------------------------------------------

namespace {
// The device of every tensor of the list (the cpu for an empty list): one kernel launch covers
// the whole list, so the tensors must share a device.
Device list_device(const char* op, const char* what, const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return Device::cpu();
  const Device device = tensors[0].device();
  for (size_t i = 1; i < tensors.size(); ++i)
    REEL_CHECK(tensors[i].device() == device, op, ": ", what, " ", i, " ", tensors[i].shape(), " is on ",
               tensors[i].device(), " but ", what, " 0 on ", device, ": one device per list expected");
  return device;
}

// params[i] and each list's [i]: defined, floating, contiguous, one shape, dtype and device;
// every param on one device, which is returned.
Device check_param_lists(const char* op, const std::vector<Tensor>& params,
                       std::initializer_list<std::pair<const char*, const std::vector<Tensor>*>> lists) {
  for (const auto& [name, list] : lists)
    REEL_CHECK(list->size() == params.size(), op, ": ", params.size(), " params but ", list->size(), " ", name);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    REEL_CHECK(p.defined(), op, ": param ", i, " is undefined");
    REEL_CHECK(is_floating(p.dtype()), op, ": param ", i, " ", p.shape(), " has dtype ", p.dtype(),
               " (f32 or f64 expected)");
    REEL_CHECK(p.is_contiguous(), op, ": param ", i, " ", p.shape(), " is not contiguous (updated in place)");
    for (const auto& [name, list] : lists) {
      const Tensor& t = (*list)[i];
      REEL_CHECK(t.defined(), op, ": ", name, " ", i, " of param ", p.shape(), " is undefined");
      REEL_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype() && t.device() == p.device(), op, ": param ", i,
                 " ", p.shape(), " ", p.dtype(), " on ", p.device(), " and its ", name, " ", t.shape(), " ", t.dtype(),
                 " on ", t.device(), " differ");
      REEL_CHECK(t.is_contiguous(), op, ": ", name, " ", i, " ", t.shape(), " is not contiguous");
    }
  }
  return list_device(op, "param", params);
}

Device check_tensor_list(const char* op, const std::vector<Tensor>& tensors, bool need_contiguous) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    REEL_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    REEL_CHECK(is_floating(t.dtype()), op, ": tensor ", i, " ", t.shape(), " has dtype ", t.dtype(),
               " (f32 or f64 expected)");
    REEL_CHECK(!need_contiguous || t.is_contiguous(), op, ": tensor ", i, " ", t.shape(),
               " is not contiguous (updated in place)");
  }
  return list_device(op, "tensor", tensors);
}

double sum_of_squares(Device device, const std::vector<Tensor>& tensors) {
#if defined(REEL_HAS_CUDA_BACKEND)
  if (!device.is_cpu()) return cuda::sum_of_squares(tensors);
#endif
  REEL_CHECK(device.is_cpu(), "global_grad_norm: this build has no CUDA backend");
  return cpu::sum_of_squares(tensors);
}
}  // namespace

void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step) {
  const char* op = "sgd_update";
  REEL_CHECK(step >= 1, op, ": step ", step, " must count from 1");
  REEL_CHECK(!nesterov || (momentum > 0 && dampening == 0), op,
             ": Nesterov momentum needs momentum > 0 and dampening 0 (got momentum ", momentum, ", dampening ",
             dampening, ")");
  const Device device = momentum != 0
                            ? check_param_lists(op, params, {{"grads", &grads}, {"momentum_bufs", &momentum_bufs}})
                            : check_param_lists(op, params, {{"grads", &grads}});
  REEL_DEVICE_DISPATCH(device, sgd_update, params, grads, momentum_bufs, lr, momentum, dampening, weight_decay,
                       nesterov, step);
}

void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay) {
  const char* op = "adamw_update";
  REEL_CHECK(step >= 1, op, ": step ", step, " must count from 1 (bias correction divides by 1 - beta^step)");
  REEL_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, op, ": betas (", beta1, ", ", beta2,
             ") must be in [0, 1)");
  const Device device = check_param_lists(op, params, {{"grads", &grads}, {"exp_avg", &m}, {"exp_avg_sq", &v}});
  REEL_DEVICE_DISPATCH(device, adamw_update, params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step,
                       decoupled_weight_decay);
}

double global_grad_norm(const std::vector<Tensor>& grads) {
  const Device device = check_tensor_list("global_grad_norm", grads, false);
  std::vector<Tensor> flat;
  flat.reserve(grads.size());
  for (const Tensor& g : grads) flat.push_back(g.contiguous());
  return std::sqrt(sum_of_squares(device, flat));
}

void scale_(const std::vector<Tensor>& tensors, double factor) {
  const Device device = check_tensor_list("scale_", tensors, true);
  REEL_DEVICE_DISPATCH(device, scale_, tensors, factor);
}

}  // namespace reel::kernels
