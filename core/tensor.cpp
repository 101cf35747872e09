// Tensor: views, copies, host access and factories.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/autograd_meta.h"
#include "core/device_backend.h"
#include "core/profile.h"
#include "core/random.h"

namespace reel {

// ---- helpers -----------------------------------------------------------------

Shape contiguous_strides(const Shape& shape, std::string_view op) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // The outermost dim scales no stride: (2^62, 0) has strides (1, 1), however large dim 0 is.
    if (i > 0) s = checked_mul(s, std::max<int64_t>(shape[i], 1), op, shape);
  }
  return strides;
}

int64_t shape_numel(const Shape& shape, std::string_view op) {
  // A zero dim makes the count 0 even where the other dims' product would overflow.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d, op, shape);
  return n;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  const int64_t r = std::max<int64_t>(rank, 1);
  REEL_CHECK(dim >= -r && dim < r, op, ": dim ", dim, " is out of range for a tensor of rank ", rank);
  return dim < 0 ? dim + r : dim;
}

// ---- differentiable views: the link to autograd ------------------------------------
// A view of a tensor that requires grad, made while grad mode is on, must be recorded on the tape,
// or gradients stop at it: w.t() of a parameter has to carry d(loss)/d(w) back to w, as users of
// PyTorch expect. The recording ops are autograd's (reel::transpose etc., autograd/ops/view.cpp);
// core never calls up into autograd: autograd registers them (core/autograd_meta.h), and their
// forward, run under NoGrad, comes back here for the plain view (untracked::).
const RecordingViews* recording_views_for(const Tensor& t);  // core/tensor_autograd.cpp

namespace {
// A contiguous copy for host access and device transfer, never recorded (item(), to_vector(),
// str() and to(device) of a tensor that requires grad must not put nodes on the tape).
Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : t.clone(); }

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  return Tensor(std::move(impl));
}

// Resolves one -1 and checks the element count.
Shape infer_shape(Shape shape, int64_t numel, const Shape& from, const char* op) {
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      REEL_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape);
      infer = static_cast<int64_t>(i);
    } else {
      REEL_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in ", shape);
    }
  }
  if (infer >= 0) {
    Shape others = shape;
    others[infer] = 1;
    const int64_t known = shape_numel(others, op);
    REEL_CHECK(known != 0 && numel % known == 0, op, ": cannot reshape ", from, " (", numel,
               " elements) into ", shape);
    shape[infer] = numel / known;
  }
  const int64_t count = shape_numel(shape, op);
  REEL_CHECK(count == numel, op, ": cannot reshape ", from, " (", numel, " elements) into ", shape, " (", count,
             " elements)");
  return shape;
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible (the rule
// torch.view uses: each run of merged dims must be contiguous within itself).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  if (shape_numel(shape) == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  // Drop size-1 dims, which impose no constraint.
  Shape s, st;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  size_t old_i = 0;
  int64_t new_i = static_cast<int64_t>(new_shape.size()) - 1;
  // Walk from the innermost dims outwards, chunk by chunk.
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (numel, innermost stride) of old chunks
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    int64_t n = s[i];
    while (j + 1 < s.size() && st[j] == st[j + 1] * s[j + 1]) {
      ++j;
      n *= s[j];
    }
    chunks.emplace_back(n, st[j]);
    i = j + 1;
  }
  (void)old_i;
  // Assign new dims to chunks from the end.
  for (size_t c = chunks.size(); c-- > 0;) {
    int64_t remaining = chunks[c].first, stride = chunks[c].second;
    while (remaining > 1 || (new_i >= 0 && new_shape[new_i] == 1)) {
      if (new_i < 0) return false;
      const int64_t d = new_shape[new_i];
      if (d == 1) {
        out[new_i--] = stride;
        continue;
      }
      if (remaining % d != 0) return false;
      out[new_i--] = stride;
      stride *= d;
      remaining /= d;
    }
  }
  while (new_i >= 0) {
    if (new_shape[new_i] != 1) return false;
    out[new_i--] = 1;
  }
  return true;
}
}  // namespace

// ---- basic accessors ---------------------------------------------------------

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[normalize_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    // Past int64 no stride can match: only a zero-element tensor gets here, and calling it
    // non-contiguous only costs a copy of nothing.
    if (__builtin_mul_overflow(expected, shape()[i], &expected)) return false;
  }
  return true;
}

void* Tensor::data_ptr() const {
  if (!storage()) return nullptr;
  REEL_CHECK(!storage()->released(), "data_ptr: the ", dtype(), " ", shape(), " tensor on ", device(),
             " has released its storage (Storage::release: a sharded parameter outside its unit's use, see "
             "distributed/fsdp.h); it must be materialized and refilled before a kernel reads or writes it");
  if (!storage()->data()) return nullptr;
  return static_cast<char*>(storage()->data()) +
         checked_mul(offset(), static_cast<int64_t>(dtype_size(dtype())), "data_ptr", shape());
}

// ---- views ---------------------------------------------------------------------

Tensor Tensor::view(Shape new_shape) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->view(*this, std::move(new_shape));
  return untracked::view(*this, std::move(new_shape));
}

Tensor Tensor::reshape(Shape new_shape) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->reshape(*this, std::move(new_shape));
  return untracked::reshape(*this, std::move(new_shape));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->transpose(*this, d0, d1);
  return untracked::transpose(*this, d0, d1);
}

Tensor Tensor::t() const {
  REEL_CHECK(dim() == 2, "t: expects a 2-D tensor, got shape ", shape());
  return transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->permute(*this, dims);
  return untracked::permute(*this, dims);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->slice(*this, d, start, end, step);
  return untracked::slice(*this, d, start, end, step);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d, dim(), "narrow");
  REEL_CHECK(dim() > 0, "narrow: cannot narrow a 0-d tensor");
  const int64_t n = shape()[d];
  // As in PyTorch: a negative start counts from the end; start + length beyond the size is an
  // error (slice would clamp it). Compared as length <= n - start, which cannot overflow.
  const int64_t from = start < 0 && start >= -n ? start + n : start;
  if (!(from >= 0 && from <= n && length >= 0 && length <= n - from)) {
    int64_t end;
    const std::string end_str = __builtin_add_overflow(start, length, &end)
                                    ? std::to_string(start) + " + " + std::to_string(length)
                                    : std::to_string(end);
    REEL_FAIL("narrow: [", start, ", ", end_str, ") is out of range for dim ", d, " of shape ", shape());
  }
  return slice(d, from, from + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->select(*this, d, index);
  return untracked::select(*this, d, index);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->squeeze(*this, d);
  return untracked::squeeze(*this, d);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->unsqueeze(*this, d);
  return untracked::unsqueeze(*this, d);
}

Tensor Tensor::expand(Shape target) const {
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->expand(*this, std::move(target));
  return untracked::expand(*this, std::move(target));
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  if (const RecordingViews* rec = recording_views_for(*this)) return rec->contiguous(*this);
  return clone();
}

// ---- views the tape never records ------------------------------------------------

namespace untracked {

Tensor view(const Tensor& x, Shape new_shape) {
  new_shape = infer_shape(std::move(new_shape), x.numel(), x.shape(), "view");
  Shape new_strides;
  REEL_CHECK(view_strides(x.shape(), x.strides(), new_shape, new_strides), "view: a tensor of shape ", x.shape(),
             " with strides ", x.strides(), " cannot be viewed as ", new_shape, "; use reshape (copies)");
  return make_view(x, new_shape, new_strides, x.offset());
}

Tensor reshape(const Tensor& x, Shape new_shape) {
  new_shape = infer_shape(std::move(new_shape), x.numel(), x.shape(), "reshape");
  Shape new_strides;
  if (view_strides(x.shape(), x.strides(), new_shape, new_strides))
    return make_view(x, new_shape, new_strides, x.offset());
  return x.clone().view(new_shape);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  d0 = normalize_dim(d0, x.dim(), "transpose");
  d1 = normalize_dim(d1, x.dim(), "transpose");
  if (x.dim() == 0) return x;
  Shape s = x.shape(), st = x.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(x, s, st, x.offset());
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  REEL_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: ", dims.size(),
             " dims given for a tensor of shape ", x.shape());
  Shape s(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = normalize_dim(dims[i], x.dim(), "permute");
    REEL_CHECK(!seen[d], "permute: dim ", d, " repeated in ", Shape(dims.begin(), dims.end()));
    seen[d] = true;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  return make_view(x, s, st, x.offset());
}

Tensor slice(const Tensor& x, int64_t d, int64_t start, int64_t end, int64_t step) {
  d = normalize_dim(d, x.dim(), "slice");
  REEL_CHECK(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  REEL_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape(), st = x.strides();
  // ceil((end - start) / step) without forming end - start + step - 1, which overflows for a
  // step near INT64_MAX.
  s[d] = end > start ? (end - start - 1) / step + 1 : 0;
  // A dim of size 0 or 1 never steps, so its stride is free: keeping it avoids stride * step
  // overflowing for a huge step.
  if (s[d] > 1) st[d] = checked_mul(st[d], step, "slice", x.shape());
  const int64_t off = checked_add(x.offset(), checked_mul(start, x.strides()[d], "slice", x.shape()), "slice", x.shape());
  return make_view(x, s, st, off);
}

Tensor select(const Tensor& x, int64_t d, int64_t index) {
  d = normalize_dim(d, x.dim(), "select");
  REEL_CHECK(x.dim() > 0, "select: cannot index a 0-d tensor");
  const int64_t n = x.shape()[d];
  REEL_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d,
             " of shape ", x.shape());
  if (index < 0) index += n;
  Shape s = x.shape(), st = x.strides();
  const int64_t off = checked_add(x.offset(), checked_mul(index, st[d], "select", x.shape()), "select", x.shape());
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(x, s, st, off);
}

Tensor squeeze(const Tensor& x, int64_t d) {
  d = normalize_dim(d, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[d] != 1) return x;
  Shape s = x.shape(), st = x.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(x, s, st, x.offset());
}

Tensor unsqueeze(const Tensor& x, int64_t d) {
  d = normalize_dim(d, x.dim() + 1, "unsqueeze");
  Shape s = x.shape(), st = x.strides();
  // The new dim has size 1, so any stride is valid; st[d] * s[d] keeps a contiguous tensor
  // contiguous, and where that product overflows (a zero-element tensor with huge dims) any
  // other value will do.
  int64_t stride = 1;
  if (d < x.dim() && __builtin_mul_overflow(st[d], s[d], &stride)) stride = st[d];
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return make_view(x, s, st, x.offset());
}

Tensor expand(const Tensor& x, Shape target) {
  REEL_CHECK(static_cast<int64_t>(target.size()) >= x.dim(), "expand: cannot expand shape ", x.shape(), " to ",
             target);
  const size_t lead = target.size() - x.shape().size();
  Shape st(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      REEL_CHECK(target[i] >= 0, "expand: invalid size ", target[i], " for a new leading dim in ", target);
      continue;
    }
    const int64_t have = x.shape()[i - lead];
    if (target[i] == -1) target[i] = have;
    REEL_CHECK(target[i] >= 0, "expand: invalid size ", target[i], " in ", target, " (-1 keeps a dim)");
    REEL_CHECK(have == target[i] || have == 1, "expand: cannot expand shape ", x.shape(), " to ", target,
               ": dim ", i, " has size ", have, " (must be 1 or ", target[i], ")");
    st[i] = have == target[i] ? x.strides()[i - lead] : 0;
  }
  shape_numel(target, "expand");  // the only view that can grow the element count: it must fit
  return make_view(x, target, st, x.offset());
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return x.clone();
}

Tensor joined(const std::vector<Tensor>& pieces, int64_t dim) {
  if (pieces.empty() || !pieces[0].defined() || pieces[0].dim() == 0) return Tensor();
  const Tensor& first = pieces[0];
  const int64_t d = normalize_dim(dim, first.dim(), "joined");
  if (first.strides()[d] <= 0) return Tensor();  // a broadcast dim: the pieces overlap
  Shape shape = first.shape();
  shape[d] = 0;
  for (const Tensor& p : pieces) {
    if (!p.defined() || p.numel() == 0 || p.storage() != first.storage() || p.dtype() != first.dtype() ||
        p.device() != first.device() || p.strides() != first.strides() || p.dim() != first.dim())
      return Tensor();
    for (int64_t k = 0; k < first.dim(); ++k)
      if (k != d && p.shape()[k] != first.shape()[k]) return Tensor();
    if (p.offset() != first.offset() + shape[d] * first.strides()[d]) return Tensor();
    shape[d] += p.shape()[d];
  }
  return make_view(first, shape, first.strides(), first.offset());
}

}  // namespace untracked

// ---- copies --------------------------------------------------------------------

namespace {
// Core's own kernels (copies, fills, random numbers) run through these, so the profiler sees
// them like any entry point's: `dst` is what the kernel writes, `read` the bytes it reads.
template <typename Fn>
void timed(const char* kernel, const Tensor& dst, int64_t read, Fn&& run) {
  if (!profile::costing()) return run();
  profile::KernelCost cost;
  cost.bytes_read = read;
  cost.bytes_written = static_cast<int64_t>(dst.nbytes());
  const profile::KernelRun timed_run(kernel, dst.device(), dst.dtype(), shape_str(dst.shape()), cost);
  run();
}

void copy_strided(const Tensor& src, const Tensor& dst) {
  timed("copy_strided", dst, static_cast<int64_t>(src.nbytes()),
        [&] { backend_for(dst.device()).copy_strided(src, dst); });
}
}  // namespace

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  if (numel() > 0) copy_strided(*this, out);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor src = dense(*this);
  Tensor out = empty(shape(), dtype(), target);
  if (numel() == 0) return out;
  const int64_t bytes = static_cast<int64_t>(nbytes());
  if (device().is_cpu()) {
    profile::record_host_sync(profile::HostSyncKind::CopyFromHost, target);  // pageable: the stream first
    timed("copy_from_host", out, bytes,
          [&] { backend_for(target).copy_from_host(out.data_ptr(), src.data_ptr(), nbytes()); });
  } else if (target.is_cpu()) {
    profile::record_host_sync(profile::HostSyncKind::CopyToHost, device());
    timed("copy_to_host", out, bytes,
          [&] { backend_for(device()).copy_to_host(out.data_ptr(), src.data_ptr(), nbytes()); });
  } else {  // between two CUDA devices: through the host, simple and rare
    Tensor host = src.to(Device::cpu());
    backend_for(target).copy_from_host(out.data_ptr(), host.data_ptr(), nbytes());
  }
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  if (numel() > 0) copy_strided(*this, out);
  return out;
}

uint64_t Tensor::version() const { return storage() ? storage()->version() : 0; }

void Tensor::bump_version() const {
  if (storage()) storage()->bump_version();
}

void Tensor::copy_(const Tensor& src) const {
  REEL_CHECK(src.shape() == shape(), "copy_: source shape ", src.shape(), " does not match destination shape ",
             shape());
  if (numel() == 0) return;
  Tensor from = src.device() == device() ? src : src.to(device());
  bump_version();  // in place: what the tape saved of this storage is stale from here on
  copy_strided(from, *this);
}

void Tensor::restore_(const Tensor& src) const {
  // The dtype may differ, as for copy_ (distributed/fsdp.h writes its f32 master shard rounded to 16 bits,
  // the same bits every time).
  REEL_CHECK(src.shape() == shape(), "restore_: source ", src.dtype(), " ", src.shape(), " does not match destination ",
             dtype(), " ", shape());
  if (numel() == 0) return;
  copy_strided(src.device() == device() ? src : src.to(device()), *this);  // no bump_version: see the header
}

void Tensor::fill_(double value) const {
  if (numel() == 0) return;
  if (is_contiguous()) {
    bump_version();  // in place (the other branch bumps in copy_)
    timed("fill", *this, 0, [&] { backend_for(device()).fill(*this, value); });
  } else {
    copy_(full(shape(), value, dtype(), device()));
  }
}

// ---- host access ---------------------------------------------------------------

double Tensor::item() const {
  REEL_CHECK(numel() == 1, "item: expects a tensor with one element, got shape ", shape());
  Tensor host = dense(to(Device::cpu()));
  switch (dtype()) {
    case DType::f32: return *host.data<float>();
    case DType::f64: return *host.data<double>();
    case DType::i32: return *host.data<int32_t>();
    case DType::i64: return static_cast<double>(*host.data<int64_t>());
    case DType::bf16: return *host.data<bf16>();  // exact, through float
    case DType::f16: return *host.data<f16>();
  }
  return 0;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  REEL_CHECK(dtype_of<T>::value == dtype(), "to_vector<", dtype_name(dtype_of<T>::value), ">: tensor has dtype ",
             dtype());
  Tensor host = dense(to(Device::cpu()));
  std::vector<T> v(static_cast<size_t>(numel()));
  if (!v.empty()) std::memcpy(v.data(), host.data_ptr(), v.size() * sizeof(T));
  return v;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bf16> Tensor::to_vector<bf16>() const;
template std::vector<f16> Tensor::to_vector<f16>() const;

// ---- factories -------------------------------------------------------------------

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) REEL_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
  // Strides, count and bytes all checked before anything is allocated.
  Shape strides = contiguous_strides(shape, "empty");
  const int64_t bytes = checked_mul(shape_numel(shape, "empty"), static_cast<int64_t>(dtype_size(dtype)), "empty", shape);
  auto impl = std::make_shared<TensorImpl>();
  if (!device.is_cpu()) backend_for(device);  // a clear error for an unavailable device, even at 0 bytes
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(bytes), device);
  impl->shape = shape;
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.numel() > 0) timed("fill", t, 0, [&] { backend_for(device).fill(t, value); });
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  REEL_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape, "from_vector"), "from_vector: ", values.size(),
             " values do not fill shape ", shape);
  Tensor host = empty(shape, dtype_of<T>::value, Device::cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return host.to(device);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector<bf16>(const std::vector<bf16>&, const Shape&, Device);
template Tensor from_vector<f16>(const std::vector<f16>&, const Shape&, Device);

Tensor tensor(std::initializer_list<float> values, Device device) {
  return from_vector(std::vector<float>(values), {static_cast<int64_t>(values.size())}, device);
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  // A NaN bound made an empty range and an infinite one a std::length_error from a host vector.
  REEL_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             "arange: start, end and step must be finite, got start ", start, ", end ", end, ", step ", step);
  REEL_CHECK(step != 0, "arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);  // inf when end - start overflows a double
  // 2^62 is beyond any memory; below it the count converts to int64 exactly enough.
  REEL_CHECK(!(count > 0x1p62), "arange: [", start, ", ", end, ") with step ", step, " has too many elements");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  // Written straight into a tensor (through the allocator, whose failure is a reel::Error), not a
  // std::vector first.
  Tensor host = empty({n}, DType::f64, Device::cpu());
  double* v = host.data<double>();
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  return host.to(dtype).to(device);
}

Tensor arange(int64_t n, DType dtype, Device device) {
  return arange(0.0, static_cast<double>(n), 1.0, dtype, device);
}

namespace {
Tensor random_tensor(const Shape& shape, DType dtype, Device device, Generator* gen, RandomKind kind,
                     const char* op) {
  REEL_CHECK(is_floating(dtype), op, ": dtype must be floating, got ", dtype);
  // A uniform f32 in [0, 1) can round up to 1 in 16 bits: drawing them needs its own rule.
  REEL_CHECK(!is_16bit_floating(dtype), op, ": dtype ", dtype, " is not supported yet (draw in f32, then .to(",
             dtype, "))");
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype, device);
  const uint64_t offset = g.next_offset();
  if (t.numel() > 0) timed("random", t, 0, [&] { backend_for(device).random(t, kind, g.seed(), offset); });
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_tensor(shape, dtype, device, gen, RandomKind::Uniform, "rand");
}
Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_tensor(shape, dtype, device, gen, RandomKind::Normal, "randn");
}

}  // namespace reel
