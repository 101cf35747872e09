// kernels/cuda/cross_entropy.cu: the fused cross-entropy over logits (N, V) with integer
// targets, forward (optionally with dlogits in the same kernel) and the separate backward; and
// mse_loss's two elementwise kernels (squared differences in f32, and the gradient).
//
// Forward, one 256-thread block per row (llm.c's fused classifier): each thread sweeps its
// strided share of the row once with the online softmax (running max m, s = sum(exp(x - m))),
// the block combines the 256 (m, s) pairs (shuffles, then one pair per warp through shared
// memory) and thread 0 writes lse = m + log s and the loss (m - x[target]) + log s. The (N, V)
// probability matrix is never written. When the caller asks for the gradient, a second sweep of
// the same block, over a row that is now in L2, writes
//   dlogits = exp(x - m) * (g / s) - g * onehot(target),   0 for an ignored row,
// so backward costs no extra kernel and training never reads the logits again. (The CPU keeps
// exp(x - m) in dlogits and rescales it, saving an exp per logit; on a GPU the exp is free next
// to the memory traffic, and reading the logits twice from L2 is cheaper than writing then
// re-reading dlogits.)
// Backward from the saved lse: dlogits = (exp(x - lse) - onehot) * dloss_row, block per row.
// The (m, s) pairs and all the arithmetic run in the dispatch's acc_t: loads T -> acc_t, stores
// acc_t -> T (no-ops for f32 and f64, where acc_t is T; bf16 and f16 widen to f32 and dlogits
// round once on store). lse and the per-row losses are acc_t (the entry point rounds the losses).
//
// mse_loss: grid-stride, one thread per element: forward (x - t)^2 into acc_t (the entry point
// sums the squares for Sum and Mean), backward 2 (x - t) g stored as T.
//
// The count of non-ignored targets (the Mean's divisor) and the f64 reduction of the per-row losses
// run in the forward's launch (kernels/cross_entropy.h, CrossEntropyPlan): the grid's last block
// (a ticket, kernels/cuda/last_block.h) counts, when the rows did not need the count, and reduces
// in the order of kLossLanes, the CPU's, so both give the same bits; under the Mean's fused gradient
// every block counts all the targets first (or, the fallback, cross_entropy_count_kernel does, a
// launch of its own before). The backward reads 1/count from the device; the loss stays there.
//
// Targets: the kernels check each target they read; an out-of-range one (not ignore_index) is
// never used as an index: the kernel records its row in the launch's slot of the device's error
// slots and writes NaN (loss) or zeros (dlogits) for it; the host raises it at its next read of the
// device (deferred: kernels/cuda/index_errors.h). check_indices (the synchronous check, for a
// caller that needs the count on the host) reads its own result back at once.
#include <algorithm>
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/index_errors.h"
#include "kernels/cuda/last_block.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;
// The forward's last block reduces with its threads as the lanes (and every block may count).
static_assert(kRowThreads == kLossLanes, "the forward's blocks are the reduction's kLossLanes lanes");

// Where the forward's rows find the count (CrossEntropyPlan).
enum CountMode : int {
  kCountGiven = 0,        // *count was written before the launch (count_first)
  kCountInBlocks = 1,     // every block counts the targets before its rows (count_in_blocks)
  kCountInLastBlock = 2,  // the last block counts, after the rows (which do not need it)
};

// ---- kernels ---------------------------------------------------------------------------------

// idx: (n). Counts indices that are not `ignore` (has_ignore) into *count and reports every
// other one outside [0, limit). Grid-stride; integer atomics only (exact, so order-independent).
template <typename I>
__global__ void __launch_bounds__(kThreads) check_indices_kernel(const I* idx, int64_t n, int64_t limit, bool has_ignore, int64_t ignore,
                                     unsigned long long* error, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (has_ignore && v == ignore) continue;
    if (v < 0 || v >= limit) report_bad_position(error, i);
    else ++c;
  }
  c = warp_sum(c);
  if ((threadIdx.x & 31) == 0 && c > 0) atomicAdd(count, c);
}

// targets: (n). How many are not ignore_index, in every thread of the calling block of kLossLanes
// threads (all must call it: it has barriers): a strided count per thread, then a shared-memory
// tree over `lanes` (kLossLanes; integers, so any order gives the same count).
template <typename I>
__device__ int64_t block_count_targets(const I* targets, int64_t n, int64_t ignore_index, int64_t* lanes) {
  int64_t c = 0;
  for (int64_t i = threadIdx.x; i < n; i += kLossLanes) c += static_cast<int64_t>(targets[i]) != ignore_index;
  lanes[threadIdx.x] = c;
  __syncthreads();
  for (int w = kLossLanes / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) lanes[threadIdx.x] += lanes[threadIdx.x + w];
    __syncthreads();
  }
  return lanes[0];
}

// losses: (n) of acc_t. Their f64 sum in kLossLanes' order (kernels/cross_entropy.h: the CPU's
// too, bit for bit), in thread 0 of the calling block of kLossLanes threads (all must call it);
// `lanes`: (kLossLanes) shared scratch.
template <typename acc_t>
__device__ double block_sum_losses(const acc_t* losses, int64_t n, double* lanes) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += kLossLanes) s += static_cast<double>(losses[i]);
  lanes[threadIdx.x] = s;
  __syncthreads();
  for (int w = kLossLanes / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) lanes[threadIdx.x] += lanes[threadIdx.x + w];
    __syncthreads();
  }
  return lanes[0];
}

// targets: (n). *count = how many are not ignore_index: the fallback's launch before the forward
// (CrossEntropyPlan::count_first). One block of kLossLanes threads.
template <typename I>
__global__ void __launch_bounds__(kLossLanes) cross_entropy_count_kernel(const I* targets, int64_t n, int64_t ignore_index,
                                                                          int64_t* count) {
  __shared__ int64_t lanes[kLossLanes];
  const int64_t c = block_count_targets(targets, n, ignore_index, lanes);
  if (threadIdx.x == 0) *count = c;
}

// The whole forward in one launch. Rows: block b takes rows b, b + gridDim.x, ... logits: (N, V);
// targets, losses, lse: (N); dlogits: (N, V) or null (no fused gradient). The gradient scale of
// every non-ignored row: grad_scale, times REEL_MEAN_SCALE(count) when `mean`, in double as the
// CPU computes it. count: () read (kCountGiven) or written by the last block; loss: () or null
// (reduction None), written by the last block: the f64 sum of the losses, times
// REEL_MEAN_SCALE(count) when `mean`, rounded to T once. ticket: the device's last-block counter.
template <typename T, typename acc_t, typename I>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_forward_kernel(const T* logits, const I* targets, int64_t ignore_index, acc_t* losses,
                                             acc_t* lse, T* dlogits, double grad_scale, bool mean, int count_mode,
                                             int64_t* count, T* loss, unsigned* ticket,
                                             unsigned long long* error, int64_t N, int64_t V) {
  using std::exp;
  using std::log;
  __shared__ MaxSum<acc_t> scratch[32];
  __shared__ int64_t count_lanes[kLossLanes];
  __shared__ double loss_lanes[kLossLanes];
  __shared__ bool last;
  // The count where the rows need it (the Mean's fused gradient), else known only at the end.
  const int64_t rows_count = count_mode == kCountGiven      ? *count
                             : count_mode == kCountInBlocks ? block_count_targets(targets, N, ignore_index, count_lanes)
                                                            : 0;
  const acc_t g = static_cast<acc_t>(grad_scale * (mean ? REEL_MEAN_SCALE(rows_count) : 1.0));
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {  // uniform over the block
    const T* xr = logits + row * V;  // (V)
    MaxSum<acc_t> ms{static_cast<acc_t>(-INFINITY), acc_t(0)};
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) ms = max_sum_add(ms, static_cast<acc_t>(xr[c]));
    ms = block_max_sum(ms, scratch);
    const int64_t t = static_cast<int64_t>(targets[row]);
    const bool ignored = t == ignore_index, valid = ignored || (t >= 0 && t < V);
    const acc_t log_s = log(ms.s);
    if (threadIdx.x == 0) {
      lse[row] = ms.m + log_s;
      if (!valid) report_bad_index(error, row, t);
      losses[row] = !valid    ? static_cast<acc_t>(NAN)
                    : ignored ? acc_t(0)
                              : (ms.m - static_cast<acc_t>(xr[t])) + log_s;
    }
    if (dlogits != nullptr) {
      T* d = dlogits + row * V;  // (V)
      const bool zero = ignored || !valid;
      const acc_t f = g / ms.s;
      for (int64_t c = threadIdx.x; c < V; c += blockDim.x)
        d[c] = zero ? T(0) : static_cast<T>(exp(static_cast<acc_t>(xr[c]) - ms.m) * f - (c == t ? g : acc_t(0)));
    }
  }
  // The grid's last block: thread 0 wrote this block's losses, and takes its ticket after them.
  if (threadIdx.x == 0) last = take_last_ticket(ticket);
  __syncthreads();
  if (last) {  // uniform over the block: its barriers are reached by all its threads
    // The count, read again rather than kept in a register across the rows (the f64 kernel spilled it).
    const int64_t counted = count_mode == kCountGiven      ? *count
                            : count_mode == kCountInBlocks ? count_lanes[0]  // unchanged since the start
                                                           : block_count_targets(targets, N, ignore_index, count_lanes);
    const double total = loss != nullptr ? block_sum_losses(losses, N, loss_lanes) : 0.0;
    if (threadIdx.x == 0) {
      if (count_mode != kCountGiven) *count = counted;
      if (loss != nullptr) *loss = static_cast<T>(total * (mean ? REEL_MEAN_SCALE(counted) : 1.0));
      reset_ticket(ticket);
    }
  }
}

// Block per row. dloss: (N) when per_row, else one value for every row; logits, dlogits:
// (N, V); targets, lse: (N).
// scale: REEL_MEAN_SCALE(*count) when count is not null, else 1.
template <typename T, typename acc_t, typename I>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_backward_kernel(const T* dloss, bool per_row, const int64_t* count, const T* logits,
                                              const I* targets, const acc_t* lse, int64_t ignore_index, T* dlogits,
                                              unsigned long long* error, int64_t N, int64_t V) {
  using std::exp;
  const double scale = count != nullptr ? REEL_MEAN_SCALE(*count) : 1.0;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int64_t t = static_cast<int64_t>(targets[row]);
    const bool ignored = t == ignore_index, valid = ignored || (t >= 0 && t < V);
    if (!valid && threadIdx.x == 0) report_bad_index(error, row, t);
    // g rounded to T first, as the gradient tensor it stands for would be.
    const acc_t g = static_cast<T>(static_cast<double>(dloss[per_row ? row : 0]) * scale);
    const acc_t l = lse[row];
    const T* xr = logits + row * V;
    T* d = dlogits + row * V;
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x)
      d[c] = ignored || !valid ? T(0) : static_cast<T>(exp(static_cast<acc_t>(xr[c]) - l) * g - (c == t ? g : acc_t(0)));
  }
}

// x, t, sq: (n). sq = (x - t)^2 in acc_t.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kThreads) mse_loss_forward_kernel(const T* x, const T* t, acc_t* sq, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    const acc_t d = static_cast<acc_t>(x[i]) - static_cast<acc_t>(t[i]);
    sq[i] = d * d;
  }
}

// dloss: (n) when per_element, else one value for every element; x, t, dx: (n). dx = 2 (x - t) g.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kThreads) mse_loss_backward_kernel(const T* dloss, bool per_element, double scale,
                                                                     const T* x, const T* t, T* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    // g rounded to T first, as the gradient tensor it stands for would be.
    const acc_t g = static_cast<T>(static_cast<double>(dloss[per_element ? i : 0]) * scale);
    dx[i] = static_cast<T>(acc_t(2) * (static_cast<acc_t>(x[i]) - static_cast<acc_t>(t[i])) * g);
  }
}

// ---- launchers -------------------------------------------------------------------------------

unsigned row_blocks(int64_t N) { return static_cast<unsigned>(std::min(N, kCrossEntropyMaxBlocks)); }

}  // namespace

int64_t check_indices(const Tensor& idx, int64_t limit, bool has_ignore, int64_t ignore) {
  const int64_t n = idx.numel();
  if (n == 0) return 0;
  set_device(idx.device());
  // [error position (all ones: none), count]: one buffer, one copy back.
  const Tensor buf = from_vector<int64_t>({-1, 0}, {2}).to(idx.device());
  auto* error = reinterpret_cast<unsigned long long*>(buf.data<int64_t>());
  dispatch_index(idx.dtype(), [&](auto zero) {
    using I = decltype(zero);
    launch("check_indices_kernel", check_indices_kernel<I>, grid_for(n, kThreads), kThreads, 0, idx.data<I>(), n,
           limit, has_ignore, ignore, error, error + 1);
  });
  const std::vector<int64_t> host = buf.to(Device::cpu()).to_vector<int64_t>();
  if (idx.device().is_meta()) return n;  // nothing ran: every target counts (kernels/meta.h)
  if (host[0] >= 0) {
    const Tensor v =
        untracked::slice(untracked::view(idx, {n}), 0, host[0], host[0] + 1).to(Device::cpu()).to(DType::i64);
    throw IndexOutOfRange(host[0], v.data<int64_t>()[0]);
  }
  return host[1];
}

void cross_entropy_count(const Tensor& targets, int64_t ignore_index, const Tensor& count) {
  set_device(targets.device());
  dispatch_index(targets.dtype(), [&](auto zero) {
    using I = decltype(zero);
    launch("cross_entropy_count_kernel", cross_entropy_count_kernel<I>, 1, kLossLanes, 0, targets.data<I>(),
           targets.numel(), ignore_index, count.data<int64_t>());
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses,
                           const Tensor& lse, const Tensor& dlogits, double grad_scale, bool mean,
                           const CrossEntropyPlan& plan, const Tensor& count, const Tensor& loss) {
  const int64_t N = logits.size(0), V = logits.size(1);
  set_device(logits.device());
  const IndexErrorBuffer error(logits.device());
  unsigned* const ticket = last_block_ticket(logits.device());
  const int count_mode = plan.count_first ? kCountGiven : plan.count_in_blocks ? kCountInBlocks : kCountInLastBlock;
  REEL_DISPATCH_FLOATING_AND_16(logits.dtype(), "cross_entropy_forward", {
    dispatch_index(targets.dtype(), [&](auto zero) {
      using I = decltype(zero);
      launch("cross_entropy_forward_kernel", cross_entropy_forward_kernel<scalar_t, acc_t, I>,
             static_cast<unsigned>(plan.blocks), kRowThreads, 0, logits.data<scalar_t>(), targets.data<I>(),
             ignore_index, losses.data<acc_t>(), lse.data<acc_t>(),
             dlogits.defined() ? dlogits.data<scalar_t>() : nullptr, grad_scale, mean, count_mode,
             count.data<int64_t>(), loss.defined() ? loss.data<scalar_t>() : nullptr, ticket, error.ptr(), N, V);
    });
  })
  error.check(targets);
}

void cross_entropy_backward(const Tensor& dloss, const Tensor& count, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const bool per_row = dloss.numel() > 1;  // else one gradient for every row
  set_device(logits.device());
  const IndexErrorBuffer error(logits.device());
  REEL_DISPATCH_FLOATING_AND_16(logits.dtype(), "cross_entropy_backward", {
    dispatch_index(targets.dtype(), [&](auto zero) {
      using I = decltype(zero);
      launch("cross_entropy_backward_kernel", cross_entropy_backward_kernel<scalar_t, acc_t, I>, row_blocks(N),
             kRowThreads, 0, dloss.data<scalar_t>(), per_row, count.defined() ? count.data<int64_t>() : nullptr,
             logits.data<scalar_t>(), targets.data<I>(), lse.data<acc_t>(), ignore_index,
             dlogits.data<scalar_t>(), error.ptr(), N, V);
    });
  })
  error.check(targets);
}

void mse_loss_forward(const Tensor& input, const Tensor& target, const Tensor& sq) {
  const int64_t n = input.numel();
  set_device(input.device());
  REEL_DISPATCH_FLOATING_AND_16(input.dtype(), "mse_loss_forward", {
    launch("mse_loss_forward_kernel", mse_loss_forward_kernel<scalar_t, acc_t>, grid_for(n, kThreads), kThreads, 0,
           input.data<scalar_t>(), target.data<scalar_t>(), sq.data<acc_t>(), n);
  })
}

void mse_loss_backward(const Tensor& dloss, double scale, const Tensor& input, const Tensor& target,
                       const Tensor& dinput) {
  const int64_t n = input.numel();
  const bool per_element = dloss.numel() > 1;  // else one gradient for every element
  set_device(input.device());
  REEL_DISPATCH_FLOATING_AND_16(input.dtype(), "mse_loss_backward", {
    launch("mse_loss_backward_kernel", mse_loss_backward_kernel<scalar_t, acc_t>, grid_for(n, kThreads), kThreads, 0,
           dloss.data<scalar_t>(), per_element, scale, input.data<scalar_t>(), target.data<scalar_t>(),
           dinput.data<scalar_t>(), n);
  })
}

}  // namespace reel::kernels::cuda
