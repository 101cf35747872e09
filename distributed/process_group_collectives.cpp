// ProcessGroup's collectives (see process_group.h): all_reduce, reduce_scatter, all_gather,
// reduce, broadcast, barrier. Each checks its arguments on this rank before any communication, then takes
// the NCCL path (cuda tensors, NCCL chosen; meta tensors in a simulated world, the same steps with no
// communicator) or MPI (host buffers: in place, or staged through the host); process_group.cpp polls
// and completes what they start.
#include <mpi.h>

#include <sstream>
#include <string>

#include "distributed/process_group.h"
#include "distributed/process_group_internal.h"

namespace reel::distributed {

using process_group_detail::mpi_error;

namespace {

// The MPI type of t's elements. 16-bit floats travel as 16-bit words where nothing adds them (an
// all-gather, a broadcast: `reduces` false); MPI has no 16-bit floating type to sum them with.
MPI_Datatype mpi_type(DType t, const std::string& what, bool reduces) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::bf16:
    case DType::f16:
      if (!reduces) return MPI_UINT16_T;
      break;
  }
  REEL_FAIL("dist: ", what, ": dtype ", t, " has no MPI type to reduce with (reduce 16-bit values in f32)");
}

std::string describe(Collective c, ReduceOp op, const Tensor& t, bool reduces, bool nccl) {
  std::ostringstream os;
  os << collective_name(c);
  if (reduces) os << (op == ReduceOp::Sum ? " (sum)" : " (average)");
  os << " of " << t.dtype() << " " << shape_str(t.shape()) << " on " << t.device();
  if (nccl) os << " through NCCL";
  return os.str();
}

// A contiguous host tensor with t's values: t itself when it is one already (communicated in place).
Tensor host_copy(const Tensor& t) {
  if (t.device().is_cpu()) return t.contiguous();
  return t.to(Device::cpu()).contiguous();
}
// A contiguous host tensor MPI may write for t: t itself when it is one, else a fresh buffer.
Tensor host_target(const Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t;
  return empty(t.shape(), t.dtype(), Device::cpu());
}
// The same on t's own device, for NCCL.
Tensor device_copy(const Tensor& t) { return t.contiguous(); }
Tensor device_target(const Tensor& t) { return t.is_contiguous() ? t : empty(t.shape(), t.dtype(), t.device()); }

// Reductions of 16-bit floats are refused on every path (MPI and the emulated NCCL have no 16-bit
// sum, and a real NCCL's would round at every step): reduce in f32.
void check_not_16bit(const Tensor& t, const std::string& what) {
  REEL_CHECK(t.dtype() != DType::bf16 && t.dtype() != DType::f16, "dist: ", what,
             ": 16-bit floats are gathered and broadcast, not reduced; reduce them in f32");
}

int count_of(const Tensor& t, const std::string& what) {
  REEL_CHECK(t.numel() <= INT32_MAX, "dist: ", what, ": ", t.numel(),
             " elements is more than one MPI call takes (2^31 - 1); split the tensor");
  return static_cast<int>(t.numel());
}

}  // namespace


Work ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op) {
  REEL_CHECK(t.defined(), "dist: all_reduce of an undefined tensor");
  const bool nccl = takes_nccl(t.device());
  auto s = std::make_shared<Work::State>();
  s->what = describe(Collective::AllReduce, op, t, true, nccl);
  REEL_CHECK(op == ReduceOp::Sum || t.dtype() == DType::f32 || t.dtype() == DType::f64, "dist: ", s->what,
             ": an average needs a floating-point tensor");
  check_not_16bit(t, s->what);
  s->user = t;
  check_simulable(*s, t);
  if (nccl) {
    s->buf_out = device_copy(t);
    if (op == ReduceOp::Average) s->scale = nccl::Comm::average_scale(size_);
    enqueue_nccl(*s, Collective::AllReduce, t, t.numel(), [&](nccl::Comm& comm) {
      comm.all_reduce(s->buf_out.data_ptr(), s->buf_out.data_ptr(), static_cast<size_t>(t.numel()), t.dtype(), op);
    });
    return start_nccl(Collective::AllReduce, std::move(s));
  }
  if (!mpi_) return start(Collective::AllReduce, std::move(s));  // the sum over one rank
  const MPI_Datatype type = mpi_type(t.dtype(), s->what, true);
  const int n = count_of(t, s->what);
  s->buf_out = host_copy(t);
  if (op == ReduceOp::Average) s->scale = 1.0 / size_;
  if (const int rc = MPI_Iallreduce(MPI_IN_PLACE, s->buf_out.data_ptr(), n, type, MPI_SUM, MPI_COMM_WORLD,
                                    &s->request);
      rc != MPI_SUCCESS)
    fail(*s, "failed to start (MPI: " + mpi_error(rc) + ")");
  return start(Collective::AllReduce, std::move(s));
}

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

Work ProcessGroup::reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op) {
  REEL_CHECK(output.defined() && input.defined(), "dist: reduce_scatter of an undefined tensor");
  const bool nccl = takes_nccl(input.device()) && output.device() == input.device();
  auto s = std::make_shared<Work::State>();
  s->what = describe(Collective::ReduceScatter, op, input, true, nccl);
  REEL_CHECK(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(), "dist: ", s->what,
             ": the output must hold 1/", size_, " of the input's ", input.numel(), " elements in its dtype; got ",
             output.dtype(), " ", output.shape());
  REEL_CHECK(op == ReduceOp::Sum || input.dtype() == DType::f32 || input.dtype() == DType::f64, "dist: ", s->what,
             ": an average needs a floating-point tensor");
  check_not_16bit(input, s->what);
  s->user = output;
  check_simulable(*s, input);
  if (nccl) {
    s->buf_in = device_copy(input);
    s->buf_out = device_target(output);
    if (op == ReduceOp::Average) s->scale = nccl::Comm::average_scale(size_);
    enqueue_nccl(*s, Collective::ReduceScatter, input, input.numel(), [&](nccl::Comm& comm) {
      comm.reduce_scatter(s->buf_in.data_ptr(), s->buf_out.data_ptr(), static_cast<size_t>(output.numel()),
                          input.dtype(), op);
    });
    return start_nccl(Collective::ReduceScatter, std::move(s));
  }
  if (!mpi_) {
    output.copy_(input.reshape(output.shape()));
    return start(Collective::ReduceScatter, std::move(s));
  }
  const MPI_Datatype type = mpi_type(input.dtype(), s->what, true);
  const int n = count_of(output, s->what);
  count_of(input, s->what);
  s->buf_in = host_copy(input);
  s->buf_out = host_target(output);
  if (op == ReduceOp::Average) s->scale = 1.0 / size_;
  if (const int rc = MPI_Ireduce_scatter_block(s->buf_in.data_ptr(), s->buf_out.data_ptr(), n, type, MPI_SUM,
                                               MPI_COMM_WORLD, &s->request);
      rc != MPI_SUCCESS)
    fail(*s, "failed to start (MPI: " + mpi_error(rc) + ")");
  return start(Collective::ReduceScatter, std::move(s));
}

void ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

Work ProcessGroup::all_gather_async(const Tensor& output, const Tensor& input, Write write) {
  REEL_CHECK(output.defined() && input.defined(), "dist: all_gather of an undefined tensor");
  const bool nccl = takes_nccl(input.device()) && output.device() == input.device();
  auto s = std::make_shared<Work::State>();
  s->what = describe(Collective::AllGather, ReduceOp::Sum, input, false, nccl);
  REEL_CHECK(output.numel() == input.numel() * size_ && input.dtype() == output.dtype(), "dist: ", s->what,
             ": the output must hold ", size_, " times the input's ", input.numel(), " elements in its dtype; got ",
             output.dtype(), " ", output.shape());
  s->user = output;
  s->restore = write == Write::Restore;
  // In place: the input is this rank's own slot of a contiguous output (MPI_IN_PLACE, NCCL's in-place
  // form), so no send buffer exists besides the output.
  const bool in_place = output.is_contiguous() && input.is_contiguous() && input.storage() == output.storage() &&
                        input.offset() == output.offset() + rank_ * input.numel();
  check_simulable(*s, input);
  if (nccl) {
    s->buf_in = device_copy(input);
    s->buf_out = device_target(output);
    enqueue_nccl(*s, Collective::AllGather, output, output.numel(), [&](nccl::Comm& comm) {
      comm.all_gather(s->buf_in.data_ptr(), s->buf_out.data_ptr(), static_cast<size_t>(input.numel()), input.dtype());
    });
    return start_nccl(Collective::AllGather, std::move(s));
  }
  if (!mpi_) {
    if (in_place) {
      if (!s->restore) output.bump_version();
    } else if (s->restore) {
      output.restore_(input.reshape(output.shape()));
    } else {
      output.copy_(input.reshape(output.shape()));
    }
    return start(Collective::AllGather, std::move(s));
  }
  const MPI_Datatype type = mpi_type(input.dtype(), s->what, false);
  const int n = count_of(input, s->what);
  count_of(output, s->what);
  s->buf_out = host_target(output);
  const bool mpi_in_place = in_place && s->buf_out.same(output);  // else staged: the input is copied out
  if (!mpi_in_place) s->buf_in = host_copy(input);
  if (const int rc = MPI_Iallgather(mpi_in_place ? MPI_IN_PLACE : s->buf_in.data_ptr(), n, type,
                                    s->buf_out.data_ptr(), n, type, MPI_COMM_WORLD, &s->request);
      rc != MPI_SUCCESS)
    fail(*s, "failed to start (MPI: " + mpi_error(rc) + ")");
  return start(Collective::AllGather, std::move(s));
}

void ProcessGroup::all_gather(const Tensor& output, const Tensor& input, Write write) {
  all_gather_async(output, input, write).wait();
}

Work ProcessGroup::reduce_async(const Tensor& t, int root, ReduceOp op) {
  REEL_CHECK(t.defined(), "dist: reduce of an undefined tensor");
  const bool nccl = takes_nccl(t.device());
  auto s = std::make_shared<Work::State>();
  s->what = describe(Collective::Reduce, op, t, true, nccl) + " to rank " + std::to_string(root);
  REEL_CHECK(root >= 0 && root < size_, "dist: ", s->what, ": the root must be a rank in [0, ", size_, ")");
  REEL_CHECK(op == ReduceOp::Sum || t.dtype() == DType::f32 || t.dtype() == DType::f64, "dist: ", s->what,
             ": an average needs a floating-point tensor");
  check_not_16bit(t, s->what);
  const bool is_root = rank_ == root;
  if (is_root) s->user = t;  // elsewhere t is only sent: no result to write back
  check_simulable(*s, t);
  if (nccl) {
    // Root reduces into its copy (t itself when contiguous); the others send theirs.
    (is_root ? s->buf_out : s->buf_in) = device_copy(t);
    void* buf = is_root ? s->buf_out.data_ptr() : s->buf_in.data_ptr();
    if (op == ReduceOp::Average && is_root) s->scale = nccl::Comm::average_scale(size_);
    enqueue_nccl(*s, Collective::Reduce, t, t.numel(), [&](nccl::Comm& comm) {
      comm.reduce(buf, buf, static_cast<size_t>(t.numel()), t.dtype(), op, root);
    });
    return start_nccl(Collective::Reduce, std::move(s));
  }
  if (!mpi_) return start(Collective::Reduce, std::move(s));  // the sum over one rank
  const MPI_Datatype type = mpi_type(t.dtype(), s->what, true);
  const int n = count_of(t, s->what);
  if (is_root) {
    s->buf_out = host_copy(t);
    if (op == ReduceOp::Average) s->scale = 1.0 / size_;
  } else {
    s->buf_in = host_copy(t);
  }
  if (const int rc = MPI_Ireduce(is_root ? MPI_IN_PLACE : s->buf_in.data_ptr(),
                                 is_root ? s->buf_out.data_ptr() : nullptr, n, type, MPI_SUM, root, MPI_COMM_WORLD,
                                 &s->request);
      rc != MPI_SUCCESS)
    fail(*s, "failed to start (MPI: " + mpi_error(rc) + ")");
  return start(Collective::Reduce, std::move(s));
}

void ProcessGroup::reduce(const Tensor& t, int root, ReduceOp op) { reduce_async(t, root, op).wait(); }

void ProcessGroup::broadcast(const Tensor& t, int root) {
  REEL_CHECK(t.defined(), "dist: broadcast of an undefined tensor");
  const bool nccl = takes_nccl(t.device());
  auto s = std::make_shared<Work::State>();
  s->what = describe(Collective::Broadcast, ReduceOp::Sum, t, false, nccl) + " from rank " + std::to_string(root);
  REEL_CHECK(root >= 0 && root < size_, "dist: ", s->what, ": the root must be a rank in [0, ", size_, ")");
  s->user = t;
  if (simulated_ && root != 0) check_simulable(*s, t);  // rank 0's own values need nobody else's
  if (nccl) {
    s->buf_out = device_copy(t);
    enqueue_nccl(*s, Collective::Broadcast, t, t.numel(), [&](nccl::Comm& comm) {
      comm.broadcast(s->buf_out.data_ptr(), static_cast<size_t>(t.numel()), t.dtype(), root);
    });
    start_nccl(Collective::Broadcast, s);
    wait_state(*s);
    return;
  }
  if (!mpi_) {
    start(Collective::Broadcast, std::move(s));
    return;
  }
  const MPI_Datatype type = mpi_type(t.dtype(), s->what, false);
  const int n = count_of(t, s->what);
  s->buf_out = host_copy(t);
  if (const int rc = MPI_Ibcast(s->buf_out.data_ptr(), n, type, root, MPI_COMM_WORLD, &s->request);
      rc != MPI_SUCCESS)
    fail(*s, "failed to start (MPI: " + mpi_error(rc) + ")");
  start(Collective::Broadcast, s);
  wait_state(*s);
}

void ProcessGroup::barrier() {
  auto s = std::make_shared<Work::State>();
  s->what = "barrier";
  if (mpi_) {
    if (const int rc = MPI_Ibarrier(MPI_COMM_WORLD, &s->request); rc != MPI_SUCCESS)
      fail(*s, "failed to start (MPI: " + mpi_error(rc) + ")");
  }
  start(Collective::Barrier, s);
  wait_state(*s);
}

double ProcessGroup::all_reduce(double value, ReduceOp op) {
  if (simulated_) return op == ReduceOp::Sum ? value * size_ : value;  // every rank's taken as this one's
  const Tensor t = from_vector<double>({value}, {1});
  all_reduce(t, op);
  return t.item();
}

int64_t ProcessGroup::all_reduce(int64_t value) {
  if (simulated_) return value * size_;
  const Tensor t = from_vector<int64_t>({value}, {1});
  all_reduce(t, ReduceOp::Sum);
  return t.to_vector<int64_t>()[0];
}

}  // namespace reel::distributed
