// The basic layers: parameters, initialisation, and forward through one autograd op each.
#include "nn/layers.h"

#include <cmath>

#include "autograd/nn_functions.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "kernels/batchnorm.h"

namespace reel::nn {

namespace {

// On default_device(): the innermost DeviceScope's, else cpu.
Tensor new_parameter(const Shape& shape) {
  MemoryCategory scope(Category::Parameter);
  return zeros(shape, DType::f32, default_device());
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) {
  REEL_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in ", in_features,
             ", out ", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", new_parameter({out_features, in_features}));
  init_uniform_(weight, bound);
  if (with_bias) {
    bias = register_parameter("bias", new_parameter({out_features}));
    init_uniform_(bias, bound);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv2d::Conv2d(int64_t in, int64_t out, Pair2d kernel, Pair2d stride_, Pair2d padding_, Pair2d dilation_,
               int64_t groups_, bool with_bias)
    : in_channels(in), out_channels(out), groups(groups_), kernel_size(kernel), stride(stride_), padding(padding_),
      dilation(dilation_) {
  REEL_CHECK(in > 0 && out > 0 && groups > 0 && in % groups == 0 && out % groups == 0, "Conv2d: groups ", groups,
             " must divide in_channels ", in, " and out_channels ", out, " (all positive)");
  REEL_CHECK(kernel.v[0] > 0 && kernel.v[1] > 0, "Conv2d: kernel_size (", kernel.v[0], ", ", kernel.v[1],
             ") must be positive");
  const int64_t fan_in = in / groups * kernel.v[0] * kernel.v[1];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  weight = register_parameter("weight", new_parameter({out, in / groups, kernel.v[0], kernel.v[1]}));
  init_uniform_(weight, bound);
  if (with_bias) {
    bias = register_parameter("bias", new_parameter({out}));
    init_uniform_(bias, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding, dilation, groups); }

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) {
  REEL_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: sizes must be positive, got ", num_embeddings,
             " x ", embedding_dim);
  weight = register_parameter("weight", new_parameter({num_embeddings, embedding_dim}));
  init_normal_(weight, 1.0);
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(ids, weight); }

LayerNorm::LayerNorm(int64_t dim, double eps_, bool with_bias) : eps(eps_) {
  REEL_CHECK(dim > 0, "LayerNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", new_parameter({dim}));
  weight.fill_(1.0);
  if (with_bias) bias = register_parameter("bias", new_parameter({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine) : num_groups(groups), eps(eps_) {
  REEL_CHECK(groups > 0 && channels > 0 && channels % groups == 0, "GroupNorm: ", groups,
             " groups must divide the ", channels, " channels (both positive)");
  if (!affine) return;
  weight = register_parameter("weight", new_parameter({channels}));
  weight.fill_(1.0);
  bias = register_parameter("bias", new_parameter({channels}));
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, weight, bias, eps); }

BatchNorm::BatchNorm(int64_t features, double eps_, std::optional<double> momentum_, bool affine_, bool track)
    : num_features(features), eps(eps_), momentum(momentum_), affine(affine_), track_running_stats(track) {
  // (no name() here: a constructor of the base cannot call the subclass's override)
  REEL_CHECK(features > 0, "BatchNorm: num_features must be positive, got ", features);
  if (affine) {
    weight = register_parameter("weight", new_parameter({features}));
    weight.fill_(1.0);
    bias = register_parameter("bias", new_parameter({features}));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({features}, DType::f32, default_device()));
    running_var = register_buffer("running_var", ones({features}, DType::f32, default_device()));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64, default_device()));
  }
}

int64_t BatchNorm::batches_tracked() {
  const std::shared_ptr<const void> storage = num_batches_tracked.storage();
  if (tracked_storage_.lock() != storage || num_batches_tracked.version() != tracked_version_)
    tracked_ = static_cast<int64_t>(num_batches_tracked.item());  // written elsewhere: read it back
  return tracked_;
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  // As torch.nn.modules.batchnorm._BatchNorm.forward.
  const bool update = training() && track_running_stats;
  double factor = momentum.value_or(0.0);
  if (update && !momentum) {
    // The cumulative average's factor is a host number from the count: a captured graph would
    // replay the captured one (and the count behind it) forever.
    REEL_CHECK(profile::GraphCaptureScope::current() == nullptr, name(),
               ": momentum=None (the cumulative average) cannot be captured in a CUDA graph: its factor "
               "1 / num_batches_tracked is computed on the host from the count, and a replay would reuse the "
               "captured one; give a momentum (the count then advances on the device), or run it eagerly");
    factor = 1.0 / static_cast<double>(batches_tracked() + 1);
  }
  const bool use_batch_stats = training() || !track_running_stats;
  Tensor y = batch_norm(x, track_running_stats ? running_mean : Tensor(), track_running_stats ? running_var : Tensor(),
                        weight, bias, use_batch_stats, factor, eps);
  if (update) {  // counted once the forward succeeded (PyTorch counts before it raises)
    kernels::batch_norm_count(num_batches_tracked);  // += 1 on the device: a graph replay counts too
    if (momentum) {
      tracked_storage_.reset();  // replays count unseen by the host: read back when next needed
    } else {
      tracked_ += 1;  // batches_tracked() was fresh above
      tracked_storage_ = num_batches_tracked.storage();
      tracked_version_ = num_batches_tracked.version();
    }
  }
  return y;
}

void BatchNorm1d::check_input(const Tensor& x) const {
  REEL_CHECK(x.dim() == 2 || x.dim() == 3, name(), ": expected 2D or 3D input (got ", x.dim(), "D input ",
             x.shape(), ")");
}

void BatchNorm2d::check_input(const Tensor& x) const {
  REEL_CHECK(x.dim() == 4, name(), ": expected 4D input (got ", x.dim(), "D input ", x.shape(), ")");
}

RMSNorm::RMSNorm(int64_t dim, double eps_) : eps(eps_) {
  REEL_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", new_parameter({dim}));
  weight.fill_(1.0);
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, weight, eps); }

Dropout::Dropout(double p_) : p(p_) {
  REEL_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, training()); }

MaxPool2d::MaxPool2d(Pair2d kernel, std::optional<Pair2d> stride_, Pair2d padding_, Pair2d dilation_, bool ceil_mode_)
    : kernel_size(kernel), stride(stride_ ? *stride_ : kernel), padding(padding_), dilation(dilation_),
      ceil_mode(ceil_mode_) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode);
}

AvgPool2d::AvgPool2d(Pair2d kernel, std::optional<Pair2d> stride_, Pair2d padding_, bool ceil_mode_,
                     bool count_include_pad_)
    : kernel_size(kernel), stride(stride_ ? *stride_ : kernel), padding(padding_), ceil_mode(ceil_mode_),
      count_include_pad(count_include_pad_) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }

std::shared_ptr<Module> make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "gelu") return std::make_shared<GELU>();
  if (name == "tanh") return std::make_shared<Tanh>();
  throw Error("make_activation: unknown activation '" + name + "' (choose relu, gelu or tanh)");
}

}  // namespace reel::nn
