// Entry points of the embedding family (kernels/embedding.h): checks (ids in range:
// kernels/index_check.h), contiguous flat operands, outputs, then the backend kernel.
#include "kernels/embedding.h"

#include "kernels/entry_point.h"
#include "kernels/index_check.h"

namespace reel::kernels {

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  const char* op = "embedding_forward";
  check_same_device(op, {&ids, &table});
  check_same_floating_dtype(op, {&table});
  check_index_dtype(op, "ids", ids);
  REEL_CHECK(table.dim() == 2, op, ": table ", table.shape(), " must be 2-D (num_embeddings, dim)");
  const Tensor idc = untracked::contiguous(ids);
  const int64_t V = table.size(0), C = table.size(1);
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool kernel_runs = idc.numel() * C > 0;
  check_range_before(range, idc, kernel_runs);
  Tensor out = empty(with_last(ids.shape(), C), table.dtype(), table.device());
  if (kernel_runs)
    run_indexed(range, ids.shape(), [&] {
      // Reads the ids and one table row per id (as many bytes as the output), writes the output.
      REEL_DEVICE_DISPATCH(table.device(), embedding_forward, kernel_cost({&idc, &out}, {&out}, 0),
                           untracked::view(idc, {idc.numel()}),
                           untracked::contiguous(table), as_rows(out, idc.numel(), C));
    });
  return out;
}

Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings, bool ids_checked) {
  const char* op = "embedding_backward";
  check_same_device(op, {&dout, &ids});
  check_same_floating_dtype(op, {&dout});
  check_index_dtype(op, "ids", ids);
  REEL_CHECK(num_embeddings >= 0, op, ": num_embeddings ", num_embeddings, " is negative");
  REEL_CHECK(dout.dim() == ids.dim() + 1 && rows_of(dout.shape()) == ids.shape(), op, ": dout ", dout.shape(),
             " does not match ids ", ids.shape(), ": (ids..., dim) expected");
  const Tensor idc = untracked::contiguous(ids);
  const int64_t V = num_embeddings, C = dout.size(-1), N = idc.numel();
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool kernel_runs = V * C > 0 && N > 0;
  if (!ids_checked) check_range_before(range, idc, kernel_runs);
  Tensor dtable = empty({V, C}, dout.dtype(), dout.device());
  if (dtable.numel() == 0) return dtable;
  if (N == 0) {
    dtable.fill_(0.0);
    return dtable;
  }
  run_indexed(range, ids.shape(), [&] {
    // Zeroes the table's gradient and adds one row of dout per id into it.
    REEL_DEVICE_DISPATCH(dout.device(), embedding_backward, kernel_cost({&dout, &idc}, {&dtable}, dout.numel()),
                         as_rows(dout, N, C), untracked::view(idc, {N}), dtable, !ids_checked);
  });
  return dtable;
}

void check_embedding_pos_inputs(const char* op, const Tensor& ids, const Tensor& table, const Tensor& pos) {
  check_same_device(op, {&ids, &table, &pos});
  check_same_floating_dtype(op, {&table, &pos});
  check_index_dtype(op, "ids", ids);
  REEL_CHECK(table.dim() == 2 && pos.dim() == 2 && pos.size(1) == table.size(1), op, ": table ", table.shape(),
             " and pos ", pos.shape(), " must be 2-D (rows, dim) of one dim");
  REEL_CHECK(ids.dim() == 2 && ids.size(1) <= pos.size(0), op, ": ids ", ids.shape(),
             " must be (B, T) with T at most pos's ", pos.size(0), " rows");
}

Tensor embedding_pos_forward(const Tensor& ids, const Tensor& table, const Tensor& pos) {
  const char* op = "embedding_pos_forward";
  check_embedding_pos_inputs(op, ids, table, pos);
  const Tensor idc = untracked::contiguous(ids);
  const int64_t V = table.size(0), C = table.size(1), N = idc.numel(), T = ids.size(1);
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool kernel_runs = N * C > 0;
  check_range_before(range, idc, kernel_runs);
  Tensor out = empty(with_last(ids.shape(), C), table.dtype(), table.device());
  if (kernel_runs)
    run_indexed(range, ids.shape(), [&] {
      // Reads the ids, one table row and one position row per output row, writes the output; one add
      // per element.
      REEL_DEVICE_DISPATCH(table.device(), embedding_pos_forward, kernel_cost({&idc, &out, &out}, {&out}, out.numel()),
                           untracked::view(idc, {N}), untracked::contiguous(table), untracked::contiguous(pos),
                           as_rows(out, N, C), T);
    });
  return out;
}

void check_embedding_pos_backward_inputs(const char* op, const Tensor& dout, const Tensor& ids, const Tensor& dtable,
                                         const Tensor& dpos) {
  check_same_device(op, {&dout, &ids});
  check_same_floating_dtype(op, {&dout});
  check_index_dtype(op, "ids", ids);
  REEL_CHECK(ids.dim() == 2 && dout.dim() == 3 && rows_of(dout.shape()) == ids.shape(), op, ": dout ", dout.shape(),
             " does not match ids ", ids.shape(), ": ids (B, T) and dout (B, T, dim) expected");
  const int64_t C = dout.size(2), T = ids.size(1);
  for (const Tensor* g : {&dtable, &dpos}) {
    if (!g->defined()) continue;
    check_same_device(op, {&dout, g});
    check_same_floating_dtype(op, {&dout, g});
    REEL_CHECK(g->dim() == 2 && g->size(1) == C && g->is_contiguous(), op, ": gradient buffer ", g->shape(),
               " must be contiguous (rows, ", C, ")");
  }
  REEL_CHECK(!dpos.defined() || dpos.size(0) >= T, op, ": dpos ", dpos.shape(), " has fewer rows than T = ", T);
}

void embedding_pos_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate_table,
                            const Tensor& dpos, bool accumulate_pos, bool ids_checked) {
  const char* op = "embedding_pos_backward";
  check_embedding_pos_backward_inputs(op, dout, ids, dtable, dpos);
  const int64_t C = dout.size(2), N = ids.numel(), T = ids.size(1);
  if (!dtable.defined() && !dpos.defined()) return;
  const int64_t V = dtable.defined() ? dtable.size(0) : 0;
  const Tensor idc = untracked::contiguous(ids);
  const IndexRange range{op, "id", V, std::nullopt, "of the table's rows"};
  const bool checks = dtable.defined() && !ids_checked;
  if (checks) check_range_before(range, idc, V * C > 0 && N > 0);
  if (C == 0) return;
  run_indexed(range, ids.shape(), [&] {
    // Reads dout (once per gradient computed) and the ids, writes the gradients (reads them too
    // when they accumulate); one add per dout element and gradient.
    const Tensor none;
    const int64_t grads = (dtable.defined() ? 1 : 0) + (dpos.defined() ? 1 : 0);
    REEL_DEVICE_DISPATCH(dout.device(), embedding_pos_backward,
                         kernel_cost({&dout, &idc, accumulate_table ? &dtable : &none, accumulate_pos ? &dpos : &none},
                                     {&dtable, &dpos}, grads * dout.numel()),
                         as_rows(dout, N, C), untracked::view(idc, {N}), dtable, accumulate_table, dpos,
                         accumulate_pos, T, checks);
  });
}

}  // namespace reel::kernels
