// Entry points of the layernorm family (kernels/layernorm.h): LayerNorm, RMSNorm and GroupNorm,
// forward and backward, and LayerNorm with the residual add or the embeddings fused in. Checks,
// contiguous (R, C) rows or (N, C, S) samples, outputs, then the backend kernel.
#include "kernels/layernorm.h"

#include <initializer_list>

#include "kernels/embedding.h"
#include "kernels/entry_point.h"
#include "kernels/index_check.h"

namespace reel::kernels {

namespace {
void check_norm_shapes(const char* op, const Tensor& x, const Tensor& w, const Tensor* b) {
  REEL_CHECK(x.dim() >= 1 && x.size(-1) > 0, op, ": x ", x.shape(), " needs a non-empty last dim to normalise");
  const int64_t C = x.size(-1);
  REEL_CHECK(w.shape() == Shape{C}, op, ": weight ", w.shape(), " does not match x ", x.shape(), ": (", C,
             ") expected");
  if (b)
    REEL_CHECK(b->shape() == Shape{C}, op, ": bias ", b->shape(), " does not match x ", x.shape(), ": (", C,
               ") expected");
}

// The dtype of the saved statistics (mean, rstd): x's for f32 and f64, f32 (acc_t) for bf16 and f16.
DType stat_dtype(DType x) { return is_16bit_floating(x) ? DType::f32 : x; }

// dy, x, w of one dtype (check_same_floating_dtype) and the statistics in stat_dtype(x).
void check_backward_dtypes(const char* op, std::initializer_list<const Tensor*> data,
                           std::initializer_list<const Tensor*> stats) {
  check_same_floating_dtype(op, data);
  const DType x = (*data.begin())->dtype();
  for (const Tensor* s : stats)
    REEL_CHECK(s->dtype() == stat_dtype(x), op, ": the saved statistic ", s->shape(), " is ", s->dtype(), " but x is ",
               x, ": ", stat_dtype(x), " expected (f32 for bf16 and f16 x)");
}

void check_rows_stat(const char* op, const char* what, const Tensor& stat, const Tensor& x) {
  REEL_CHECK(stat.shape() == rows_of(x.shape()), op, ": ", what, " ", stat.shape(), " does not match x ", x.shape(),
             ": ", rows_of(x.shape()), " expected (one value per row)");
}
}  // namespace

LayerNormForward layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const char* op = "layernorm_forward";
  check_same_device(op, {&x, &w, &b});
  check_same_floating_dtype(op, {&x, &w, &b});
  check_norm_shapes(op, x, w, &b);
  const int64_t C = x.size(-1), R = x.numel() / C;
  LayerNormForward r{empty(x.shape(), x.dtype(), x.device()), empty(rows_of(x.shape()), stat_dtype(x.dtype()), x.device()),
                     empty(rows_of(x.shape()), stat_dtype(x.dtype()), x.device())};
  if (R > 0)
    // Per element: the mean (1 FLOP), the centred square (3), normalise and affine (4).
    REEL_DEVICE_DISPATCH(x.device(), layernorm_forward, kernel_cost({&x, &w, &b}, {&r.y, &r.mean, &r.rstd}, 8 * R * C),
                         as_rows(x, R, C), untracked::contiguous(w),
                         untracked::contiguous(b), eps, as_rows(r.y, R, C), untracked::view(r.mean, {R}),
                         untracked::view(r.rstd, {R}));
  return r;
}

AddLayerNormForward add_layernorm_forward(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b,
                                          double eps, const Tensor& rb) {
  const char* op = "add_layernorm_forward";
  check_same_device(op, {&x, &r, &w, &b});
  check_same_floating_dtype(op, {&x, &r, &w, &b});
  check_norm_shapes(op, x, w, &b);
  REEL_CHECK(r.shape() == x.shape(), op, ": x ", x.shape(), " and the residual r ", r.shape(),
             " differ in shape (the add does not broadcast)");
  const int64_t C = x.size(-1), R = x.numel() / C;
  if (rb.defined())
    REEL_CHECK(rb.shape() == Shape{C} && rb.dtype() == x.dtype() && rb.device() == x.device(), op,
               ": the residual's bias rb ", rb.shape(), " ", rb.dtype(), " on ", rb.device(), " does not match x ",
               x.shape(), " ", x.dtype(), " on ", x.device(), ": (", C, ") of x's dtype and device expected");
  const Tensor rbc = rb.defined() ? untracked::contiguous(rb) : Tensor();
  const DType st = stat_dtype(x.dtype());
  AddLayerNormForward out{empty(x.shape(), x.dtype(), x.device()), empty(x.shape(), x.dtype(), x.device()),
                          empty(rows_of(x.shape()), st, x.device()), empty(rows_of(x.shape()), st, x.device())};
  if (R > 0)
    // Per element: the add (1 FLOP, 2 with rb), then layernorm_forward's 8.
    REEL_DEVICE_DISPATCH(x.device(), add_layernorm_forward,
                         kernel_cost({&x, &r, &rbc, &w, &b}, {&out.s, &out.y, &out.mean, &out.rstd},
                                     (rb.defined() ? 10 : 9) * R * C),
                         as_rows(x, R, C), as_rows(r, R, C), rbc, untracked::contiguous(w), untracked::contiguous(b),
                         eps, as_rows(out.s, R, C), as_rows(out.y, R, C), untracked::view(out.mean, {R}),
                         untracked::view(out.rstd, {R}));
  return out;
}

AddLayerNormForward embedding_pos_layernorm_forward(const Tensor& ids, const Tensor& table, const Tensor& pos,
                                                    const Tensor& w, const Tensor& b, double eps) {
  const char* op = "embedding_pos_layernorm_forward";
  check_same_device(op, {&ids, &table, &pos, &w, &b});
  check_embedding_pos_inputs(op, ids, table, pos);
  check_same_floating_dtype(op, {&table, &pos, &w, &b});
  REEL_CHECK(table.size(1) > 0, op, ": table ", table.shape(), " has no columns to normalise");
  const int64_t V = table.size(0), C = table.size(1), R = ids.numel(), T = ids.size(1);
  const Shape shape = with_last(ids.shape(), C);  // (B, T, C)
  for (const Tensor* p : {&w, &b})
    REEL_CHECK(p->shape() == Shape{C}, op, ": ", p == &w ? "weight " : "bias ", p->shape(),
               " does not match the table ", table.shape(), ": (", C, ") expected");
  const Tensor idc = untracked::contiguous(ids);
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  check_range_before(range, idc, R > 0);
  const DType st = stat_dtype(table.dtype());
  AddLayerNormForward out{empty(shape, table.dtype(), table.device()), empty(shape, table.dtype(), table.device()),
                          empty(ids.shape(), st, table.device()), empty(ids.shape(), st, table.device())};
  if (R > 0)
    run_indexed(range, ids.shape(), [&] {
      // Reads the ids, one table row and one position row per row, w and b; writes s and y and the
      // statistics. Per element: the add (1 FLOP), then layernorm_forward's 8.
      REEL_DEVICE_DISPATCH(table.device(), embedding_pos_layernorm_forward,
                           kernel_cost({&idc, &out.s, &out.s, &w, &b}, {&out.s, &out.y, &out.mean, &out.rstd},
                                       9 * R * C),
                           untracked::view(idc, {R}), untracked::contiguous(table), untracked::contiguous(pos), T,
                           untracked::contiguous(w), untracked::contiguous(b), eps, as_rows(out.s, R, C),
                           as_rows(out.y, R, C), untracked::view(out.mean, {R}), untracked::view(out.rstd, {R}));
    });
  return out;
}

namespace {
// A (C) gradient output: the caller's buffer (checked: contiguous (C), x's dtype and device) or a
// fresh one, never zero-filled (the kernel writes every element), except for an x of no rows,
// whose sums over no rows are zeros.
Tensor grad_out_buffer(const char* op, const char* what, const NormGradOut& out, const Tensor& x, int64_t R) {
  const int64_t C = x.size(-1);
  if (!out.into.defined()) return R > 0 ? empty({C}, x.dtype(), x.device()) : zeros({C}, x.dtype(), x.device());
  const Tensor& t = out.into;
  REEL_CHECK(t.shape() == Shape{C} && t.is_contiguous() && t.dtype() == x.dtype() && t.device() == x.device(), op,
             ": the ", what, " buffer ", t.shape(), " ", t.dtype(), " on ", t.device(),
             " must be contiguous (", C, ") ", x.dtype(), " on ", x.device(), " (x ", x.shape(), ")");
  if (R == 0 && !out.add) t.fill_(0.0);
  return t;
}
}  // namespace

namespace {
// layernorm_backward's checks and outputs (dx fresh; dw and db the caller's buffers or fresh).
LayerNormBackward prepare_layernorm_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w,
                                             const Tensor& mean, const Tensor& rstd, const NormGradOut& dw,
                                             const NormGradOut& db, const Tensor& dx_add) {
  check_same_device(op, {&dy, &x, &w, &mean, &rstd});
  check_backward_dtypes(op, {&dy, &x, &w}, {&mean, &rstd});
  check_norm_shapes(op, x, w, nullptr);
  REEL_CHECK(dy.shape() == x.shape(), op, ": dy ", dy.shape(), " and x ", x.shape(), " differ in shape");
  check_rows_stat(op, "mean", mean, x);
  check_rows_stat(op, "rstd", rstd, x);
  if (dx_add.defined()) {
    check_same_device(op, {&x, &dx_add});
    check_same_floating_dtype(op, {&x, &dx_add});
    REEL_CHECK(dx_add.shape() == x.shape(), op, ": the gradient to add to dx ", dx_add.shape(), " and x ",
               x.shape(), " differ in shape");
  }
  const int64_t C = x.size(-1), R = x.numel() / C;
  return LayerNormBackward{empty(x.shape(), x.dtype(), x.device()), grad_out_buffer(op, "dw", dw, x, R),
                           grad_out_buffer(op, "db", db, x, R), Tensor()};
}
}  // namespace

LayerNormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd, const NormGradOut& dw, const NormGradOut& db,
                                     const Tensor& dx_add, const NormGradOut* drb) {
  const char* op = "layernorm_backward";
  LayerNormBackward r = prepare_layernorm_backward(op, dy, x, w, mean, rstd, dw, db, dx_add);
  const int64_t C = x.size(-1), R = x.numel() / C;
  if (drb) r.drb = grad_out_buffer(op, "residual bias's gradient (drb)", *drb, x, R);
  const bool add_drb = drb && drb->into.defined() && drb->add;
  if (R > 0) {
    // A gradient buffer added to is read as well as written.
    const Tensor none;
    const Tensor* dw_read = dw.into.defined() && dw.add ? &r.dw : &none;
    const Tensor* db_read = db.into.defined() && db.add ? &r.db : &none;
    const Tensor* drb_read = add_drb ? &r.drb : &none;
    const Tensor dx_add_rows = dx_add.defined() ? as_rows(dx_add, R, C) : Tensor();
    // Per element: x^ and dy * w (3 FLOPs), the two row sums (4), dx (3, one more with dx_add), dw
    // and db (3), drb (1).
    REEL_DEVICE_DISPATCH(x.device(), layernorm_backward,
                         kernel_cost({&dy, &x, &w, &mean, &rstd, &dx_add, dw_read, db_read, drb_read},
                                     {&r.dx, &r.dw, &r.db, &r.drb},
                                     (13 + (dx_add.defined() ? 1 : 0) + (drb ? 1 : 0)) * R * C),
                         as_rows(dy, R, C), as_rows(x, R, C),
                         untracked::contiguous(w), contiguous_as(mean, {R}), contiguous_as(rstd, {R}), dx_add_rows,
                         as_rows(r.dx, R, C), r.dw, r.db, dw.into.defined() && dw.add, db.into.defined() && db.add,
                         r.drb, add_drb);
  }
  if (dw.into.defined()) r.dw.bump_version();  // an in-place write, seen by the saved-tensor checks
  if (db.into.defined()) r.db.bump_version();
  if (drb && drb->into.defined()) r.drb.bump_version();
  return r;
}

LayerNormBackward embedding_pos_layernorm_backward(const Tensor& dy, const Tensor& s, const Tensor& w,
                                                   const Tensor& mean, const Tensor& rstd, const NormGradOut& dw,
                                                   const NormGradOut& db, const Tensor& ds, const Tensor& ids,
                                                   const Tensor& dtable, bool accumulate_table, const Tensor& dpos,
                                                   bool accumulate_pos, bool ids_checked) {
  const char* op = "embedding_pos_layernorm_backward";
  LayerNormBackward r = prepare_layernorm_backward(op, dy, s, w, mean, rstd, dw, db, ds);
  check_embedding_pos_backward_inputs(op, r.dx, ids, dtable, dpos);
  const int64_t C = s.size(-1), R = s.numel() / C, T = ids.size(1);
  const int64_t V = dtable.defined() ? dtable.size(0) : 0;
  const Tensor idc = untracked::contiguous(ids);
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool checks = dtable.defined() && !ids_checked;
  if (checks) check_range_before(range, idc, V * C > 0 && R > 0);
  if (R > 0)
    run_indexed(range, ids.shape(), [&] {
      // layernorm_backward's and embedding_pos_backward's costs together (dx written, then read once
      // per table gradient computed).
      const Tensor none;
      const Tensor* dw_read = dw.into.defined() && dw.add ? &r.dw : &none;
      const Tensor* db_read = db.into.defined() && db.add ? &r.db : &none;
      const int64_t grads = (dtable.defined() ? 1 : 0) + (dpos.defined() ? 1 : 0);
      profile::KernelCost ln = kernel_cost({&dy, &s, &w, &mean, &rstd, &ds, dw_read, db_read}, {&r.dx, &r.dw, &r.db},
                                  (ds.defined() ? 14 : 13) * R * C);
      const profile::KernelCost emb = kernel_cost({&idc, accumulate_table ? &dtable : &none, accumulate_pos ? &dpos : &none},
                                         {&dtable, &dpos}, grads * R * C);
      ln.bytes_read += emb.bytes_read + grads * bytes_of(r.dx);
      ln.bytes_written += emb.bytes_written;
      ln.flops += emb.flops;
      REEL_DEVICE_DISPATCH(s.device(), embedding_pos_layernorm_backward, ln, as_rows(dy, R, C), as_rows(s, R, C),
                           untracked::contiguous(w), contiguous_as(mean, {R}), contiguous_as(rstd, {R}),
                           ds.defined() ? as_rows(ds, R, C) : Tensor(), as_rows(r.dx, R, C), r.dw, r.db,
                           dw.into.defined() && dw.add, db.into.defined() && db.add, untracked::view(idc, {R}), dtable,
                           accumulate_table, dpos, accumulate_pos, T, checks);
    });
  if (dw.into.defined()) r.dw.bump_version();
  if (db.into.defined()) r.db.bump_version();
  return r;
}

RMSNormForward rmsnorm_forward(const Tensor& x, const Tensor& w, double eps) {
  const char* op = "rmsnorm_forward";
  check_same_device(op, {&x, &w});
  check_same_floating_dtype(op, {&x, &w});
  check_norm_shapes(op, x, w, nullptr);
  const int64_t C = x.size(-1), R = x.numel() / C;
  RMSNormForward r{empty(x.shape(), x.dtype(), x.device()), empty(rows_of(x.shape()), stat_dtype(x.dtype()), x.device())};
  if (R > 0)
    // Per element: the square sum (2 FLOPs), scale and weight (2).
    REEL_DEVICE_DISPATCH(x.device(), rmsnorm_forward, kernel_cost({&x, &w}, {&r.y, &r.rstd}, 4 * R * C),
                         as_rows(x, R, C), untracked::contiguous(w), eps,
                         as_rows(r.y, R, C), untracked::view(r.rstd, {R}));
  return r;
}

RMSNormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  check_same_device(op, {&dy, &x, &w, &rstd});
  check_backward_dtypes(op, {&dy, &x, &w}, {&rstd});
  check_norm_shapes(op, x, w, nullptr);
  REEL_CHECK(dy.shape() == x.shape(), op, ": dy ", dy.shape(), " and x ", x.shape(), " differ in shape");
  check_rows_stat(op, "rstd", rstd, x);
  const int64_t C = x.size(-1), R = x.numel() / C;
  // dw: written whole by the kernel (zeros only for no rows: a sum over none).
  RMSNormBackward r{empty(x.shape(), x.dtype(), x.device()),
                    R > 0 ? empty({C}, x.dtype(), x.device()) : zeros({C}, x.dtype(), x.device())};
  if (R > 0)
    // Per element: x^ and dy * w (3 FLOPs), the row sum (2), dx (3), dw (2).
    REEL_DEVICE_DISPATCH(x.device(), rmsnorm_backward, kernel_cost({&dy, &x, &w, &rstd}, {&r.dx, &r.dw}, 10 * R * C),
                         as_rows(dy, R, C), as_rows(x, R, C),
                         untracked::contiguous(w), contiguous_as(rstd, {R}), as_rows(r.dx, R, C), r.dw);
  return r;
}

// ---- GroupNorm ---------------------------------------------------------------------------------

namespace {
// x (N, C, *) with C a multiple of groups; w (C). Returns S, the product of the spatial dims.
int64_t check_group_norm_shapes(const char* op, const Tensor& x, const Tensor& w, const Tensor* b, int64_t groups) {
  REEL_CHECK(x.dim() >= 2, op, ": x ", x.shape(), " needs (N, C, *) dims: a batch and a channel dim");
  const int64_t C = x.size(1);
  REEL_CHECK(groups > 0 && C % groups == 0, op, ": ", groups, " groups do not divide the ", C, " channels of x ",
             x.shape());
  REEL_CHECK(w.shape() == Shape{C}, op, ": weight ", w.shape(), " does not match the channels of x ", x.shape(),
             ": (", C, ") expected");
  if (b)
    REEL_CHECK(b->shape() == Shape{C}, op, ": bias ", b->shape(), " does not match the channels of x ", x.shape(),
               ": (", C, ") expected");
  return C == 0 ? 0 : x.numel() / (x.size(0) * C);
}
}  // namespace

GroupNormForward group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups, double eps) {
  const char* op = "group_norm_forward";
  check_same_device(op, {&x, &w, &b});
  check_same_floating_dtype(op, {&x, &w, &b});
  const int64_t S = check_group_norm_shapes(op, x, w, &b, groups);
  const int64_t N = x.size(0), C = x.size(1);
  REEL_CHECK(N == 0 || S > 0, op, ": x ", x.shape(), " has no positions to normalise over");
  GroupNormForward r{empty(x.shape(), x.dtype(), x.device()), empty({N, groups}, stat_dtype(x.dtype()), x.device()),
                     empty({N, groups}, stat_dtype(x.dtype()), x.device())};
  if (N > 0)
    // Per element: the mean (1 FLOP), the centred square (3), normalise and affine (4).
    REEL_DEVICE_DISPATCH(x.device(), group_norm_forward,
                         kernel_cost({&x, &w, &b}, {&r.y, &r.mean, &r.rstd}, 8 * N * C * S),
                         contiguous_as(x, {N, C, S}), untracked::contiguous(w), untracked::contiguous(b), groups, eps,
                         untracked::view(r.y, {N, C, S}), r.mean, r.rstd);
  return r;
}

GroupNormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, int64_t groups) {
  const char* op = "group_norm_backward";
  check_same_device(op, {&dy, &x, &w, &mean, &rstd});
  check_backward_dtypes(op, {&dy, &x, &w}, {&mean, &rstd});
  const int64_t S = check_group_norm_shapes(op, x, w, nullptr, groups);
  REEL_CHECK(dy.shape() == x.shape(), op, ": dy ", dy.shape(), " and x ", x.shape(), " differ in shape");
  const int64_t N = x.size(0), C = x.size(1);
  for (const Tensor* stat : {&mean, &rstd})
    REEL_CHECK(stat->shape() == (Shape{N, groups}), op, ": ", stat == &mean ? "mean " : "rstd ", stat->shape(),
               " does not match x ", x.shape(), " in ", groups, " groups: (", N, ", ", groups, ") expected");
  GroupNormBackward r{empty(x.shape(), x.dtype(), x.device()), zeros({C}, x.dtype(), x.device()),
                      zeros({C}, x.dtype(), x.device())};
  if (N > 0 && S > 0)
    // Per element: x^ and dy * w (3 FLOPs), the two group sums (4), dx (3), dw and db (3).
    REEL_DEVICE_DISPATCH(x.device(), group_norm_backward,
                         kernel_cost({&dy, &x, &w, &mean, &rstd}, {&r.dx, &r.dw, &r.db}, 13 * N * C * S),
                         contiguous_as(dy, {N, C, S}), contiguous_as(x, {N, C, S}), untracked::contiguous(w),
                         untracked::contiguous(mean), untracked::contiguous(rstd), groups,
                         untracked::view(r.dx, {N, C, S}), r.dw, r.db);
  return r;
}

}  // namespace reel::kernels
