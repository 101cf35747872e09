// Tensor: a strided view (shape, strides, offset, dtype) of a shared Storage on one device.
//
// A Tensor is a handle: copies share one TensorImpl (as torch.Tensor does), so autograd state
// attached to a tensor is seen through every copy. Views (view/reshape, transpose/permute,
// slice/narrow/select, squeeze/unsqueeze, expand) make a new TensorImpl over the same Storage.
// Strides and offsets count elements, not bytes.
//
// Views and contiguous() are differentiable: on a tensor that requires grad, in grad mode, they
// are recorded on the tape as the ops reel::view, reel::transpose, ... (autograd/functions.h,
// registered with core: core/autograd_meta.h), so w.t() of a parameter carries gradients back to
// w. The untracked:: views below never record. The other copies (clone, to(device),
// to(dtype)) are not recorded: a copy they make is cut from the graph, as by detach().
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/checked_math.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace reel {

struct AutogradMeta;  // core/autograd_meta.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null for a zero-element tensor that never allocated
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  Device device;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  size_t nbytes() const {
    return static_cast<size_t>(checked_mul(numel(), static_cast<int64_t>(dtype_size(dtype())), "nbytes", shape()));
  }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl* impl_ptr() const { return impl_.get(); }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }  // same handle

  // Address of element 0 (offset applied). data<T>() checks T against dtype().
  void* data_ptr() const;
  template <typename T> T* data() const {
    REEL_CHECK(dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value),
               ">: tensor has dtype ", dtype());
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage) ----
  Tensor view(Shape shape) const;      // needs compatible strides; one dim may be -1
  Tensor reshape(Shape shape) const;   // a view when possible, else a contiguous copy
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;                    // transpose of a 2-D tensor
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // python rules
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;  // start < 0 counts from the end
  Tensor select(int64_t dim, int64_t index) const;  // drops dim
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(Shape shape) const;    // size-1 dims broadcast with stride 0; -1 keeps a dim

  // ---- copies ----
  Tensor contiguous() const;           // itself when already contiguous
  Tensor clone() const;                // always a new contiguous copy
  Tensor to(Device device) const;      // itself when already there
  Tensor to(DType dtype) const;        // itself when already of that dtype; to bf16/f16: core/half.h's rounding
  void copy_(const Tensor& src) const;  // this = src (same shape; device/dtype may differ: converted as by to)
  // copy_ WITHOUT bumping the version: only for writing back the very values this storage held
  // before it was released (Storage::release), e.g. a sharded parameter gathered again for a
  // backward or a checkpoint replay. What the tape saved of it then reads exactly what forward read,
  // so its version checks must keep passing; any other write must use copy_.
  void restore_(const Tensor& src) const;
  void fill_(double value) const;      // in place: handles are shared, the data is not const
  // The storage's version counter (core/storage.h): how many in-place writes it has seen; 0 for
  // a tensor without storage. bump_version() is for in-place kernels outside core.
  uint64_t version() const;
  void bump_version() const;

  // ---- host access ----
  double item() const;                 // one element, any device
  template <typename T> std::vector<T> to_vector() const;  // T must match dtype()
  std::string str() const;             // shape, dtype, device and abbreviated values

  // ---- autograd state (core/autograd_meta.h; its meaning is autograd's) ----
  std::shared_ptr<AutogradMeta>& autograd_meta() const { return impl().autograd; }
  bool requires_grad() const;
  // Marks a leaf (a tensor no recorded op made: a parameter, an input) as wanting a gradient.
  const Tensor& set_requires_grad(bool on = true) const;
  bool is_leaf() const;                // not made by a recorded op
  Tensor grad() const;                 // a leaf's accumulated gradient; undefined before its first backward
  void set_grad(const Tensor& grad) const;  // replaces the buffer (undefined: drops it); checked by backward
  Tensor detach() const;               // same storage, no autograd history, does not require grad

 private:
  TensorImpl& impl() const {
    REEL_CHECK(impl_ != nullptr, "tensor: use of an undefined (default-constructed) tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- views the tape never records ----
// The same views as the Tensor methods, but never recorded on the tape, whatever the tensor: what
// kernel entry points and the tape itself use, so that reshaping a parameter inside a kernel call
// cannot put a node on the tape. The methods are these plus recording when the tensor requires
// grad in grad mode.
namespace untracked {
Tensor view(const Tensor& x, Shape shape);
Tensor reshape(const Tensor& x, Shape shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, Shape shape);
Tensor contiguous(const Tensor& x);  // x itself when already contiguous, else a copy
// The inverse of narrowing: the view whose consecutive narrows along `dim` are `pieces`, when they
// lie so in one storage (same dtype, device and strides, each piece's offset where the previous
// one ends along dim, none empty); undefined otherwise. split's backward hands back the gradient
// its consumers wrote into one buffer (kernels::attention_backward's packed q, k, v gradients)
// without concatenating it.
Tensor joined(const std::vector<Tensor>& pieces, int64_t dim);
}  // namespace untracked

// ---- factories ----
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// [start, end) with step, like numpy.arange; start, end and step must be finite, step non-zero.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::f32,
              Device device = Device::cpu());
Tensor arange(int64_t n, DType dtype = DType::f32, Device device = Device::cpu());
// Tensors from host data (copied), shape must match the number of values.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
Tensor tensor(std::initializer_list<float> values, Device device = Device::cpu());  // 1-D f32
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());

class Generator;
// Uniform in [0, 1) and standard normal, from `gen` (the default generator when null).
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
            Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
             Generator* gen = nullptr);

// Helpers shared by ops. Both raise reel::Error naming `op` and the shape when a product
// overflows int64 (core/checked_math.h). shape_numel is 0 when any dim is 0, whatever the others;
// contiguous_strides needs the product of every dim but the first (zero dims counted as 1) to fit.
Shape contiguous_strides(const Shape& shape, std::string_view op = "contiguous_strides");
int64_t shape_numel(const Shape& shape, std::string_view op = "numel");
int64_t normalize_dim(int64_t dim, int64_t rank, const char* op);  // -1 -> rank-1, checked

}  // namespace reel
