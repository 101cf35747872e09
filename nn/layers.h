// The basic layers: Linear, Conv2d, Embedding, LayerNorm, RMSNorm, GroupNorm, BatchNorm1d/2d, Dropout, the
// activations, and MaxPool2d, AvgPool2d and Flatten. Each is a
// thin Module over one differentiable op of autograd/ (which holds the forward and backward), with
// PyTorch's parameter names, layouts and default initialisation.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "autograd/ops/pool.h"  // Pair2d: an int or an (h, w) pair, as PyTorch's pooling arguments
#include "nn/module.h"

namespace reel::nn {

// y = x W^T + b; W (out, in), b (out). Init as torch.nn.Linear: U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  std::string name() const override { return "Linear"; }
  Tensor weight, bias;  // bias undefined without one

 protected:
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
};

// table[ids]; weight (V, C). Init N(0, 1) as torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  std::string name() const override { return "Embedding"; }
  Tensor weight;

 protected:
  Tensor forward(const Tensor& ids) override;  // (N...) i32/i64 -> (N..., C)
};

// torch.nn.Conv2d (zero padding): x (N, in_channels, H, W) -> (N, out_channels, OH, OW);
// weight (out_channels, in_channels / groups, kH, kW), bias (out_channels). Init as PyTorch's
// (kaiming_uniform with a = sqrt(5)): weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// fan_in = in_channels / groups * kH * kW.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair2d kernel_size, Pair2d stride = 1, Pair2d padding = 0,
         Pair2d dilation = 1, int64_t groups = 1, bool bias = true);
  std::string name() const override { return "Conv2d"; }
  Tensor weight, bias;  // bias undefined without one
  int64_t in_channels, out_channels, groups;
  Pair2d kernel_size, stride, padding, dilation;

 protected:
  Tensor forward(const Tensor& x) override;
};

// Over the last dim; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  std::string name() const override { return "LayerNorm"; }
  Tensor weight, bias;
  double eps;

 protected:
  Tensor forward(const Tensor& x) override;
};

// torch.nn.GroupNorm: x (N, C, *) in num_groups groups of consecutive channels; weight (ones) and
// bias (zeros) per channel when affine. No running statistics, so no train/eval difference.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  std::string name() const override { return "GroupNorm"; }
  Tensor weight, bias;
  int64_t num_groups;
  double eps;

 protected:
  Tensor forward(const Tensor& x) override;
};

// torch.nn.BatchNorm1d / BatchNorm2d (their common part, PyTorch's _BatchNorm): per channel c of
// x (N, C, *), y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c].
//   train(): the batch's statistics (biased variance); the running statistics move towards them,
//     with the unbiased variance: running = (1 - momentum) running + momentum batch, momentum
//     nullopt meaning the cumulative average (1 / num_batches_tracked). One value per channel is
//     a reel::Error, as in PyTorch.
//   eval(): the running statistics.
// Parameters weight (ones) and bias (zeros), (C), when affine; buffers running_mean (zeros),
// running_var (ones), (C), and num_batches_tracked (a 0-dim i64), when track_running_stats: the
// names of PyTorch's state_dict, so weights and statistics load from PyTorch through safetensors.
// Without track_running_stats it always normalises with the batch's statistics.
// Its statistics are per micro-batch: accumulating N micro-batches is NOT one batch of all their
// samples (docs/design.md, "Optimizers and the accumulation window"); GroupNorm/LayerNorm are.
// num_batches_tracked counts on its device: each training forward that succeeded adds 1 there
// (kernels::batch_norm_count), so with a momentum a step neither reads nor writes the count from
// the host and a captured CUDA graph (core/graph.h) counts at every replay. momentum nullopt needs
// the count on the host (the factor 1 / count is a host number handed to the kernel): it keeps a
// host copy, and a training forward under a CUDA graph capture is a reel::Error.
class BatchNorm : public Module {
 public:
  Tensor weight, bias;                                    // (C), undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), () i64; undefined without tracking
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;

 protected:
  Tensor forward(const Tensor& x) override;
  BatchNorm(int64_t num_features, double eps, std::optional<double> momentum, bool affine, bool track_running_stats);
  virtual void check_input(const Tensor& x) const = 0;  // the dims the subclass accepts

 private:
  // momentum nullopt: num_batches_tracked's value as last counted here, the storage and version
  // it had then, so a step does not wait for the device to read it; read back (item()) only when
  // something else wrote the buffer (load_state_dict, to(device)) or a forward with a momentum
  // counted on the device alone (it resets tracked_storage_: graph replays count unseen).
  int64_t tracked_ = 0;
  std::weak_ptr<const void> tracked_storage_;
  uint64_t tracked_version_ = 0;
  int64_t batches_tracked();
};

// (N, C) or (N, C, L).
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input(const Tensor& x) const override;
};

// (N, C, H, W).
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input(const Tensor& x) const override;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  std::string name() const override { return "RMSNorm"; }
  Tensor weight;
  double eps;

 protected:
  Tensor forward(const Tensor& x) override;
};

// Active in train(), the identity in eval(). Masks come from the default generator, recorded on
// the tape, so checkpoint replays reproduce them.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  std::string name() const override { return "Dropout"; }
  double p;

 protected:
  Tensor forward(const Tensor& x) override;
};

// torch.nn.MaxPool2d (no return_indices): (N, C, H, W) -> (N, C, OH, OW), or unbatched (C, H, W)
// -> (C, OH, OW); stride defaults to kernel_size; ceil_mode as PyTorch's (max_pool2d). No
// parameters.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair2d kernel_size, std::optional<Pair2d> stride = std::nullopt, Pair2d padding = 0,
                     Pair2d dilation = 1, bool ceil_mode = false);
  std::string name() const override { return "MaxPool2d"; }
  Pair2d kernel_size, stride, padding, dilation;
  bool ceil_mode;

 protected:
  Tensor forward(const Tensor& x) override;
};

// torch.nn.AvgPool2d (no divisor_override): stride defaults to kernel_size; ceil_mode and
// count_include_pad as PyTorch's (avg_pool2d); (N, C, H, W) or unbatched (C, H, W).
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair2d kernel_size, std::optional<Pair2d> stride = std::nullopt, Pair2d padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  std::string name() const override { return "AvgPool2d"; }
  Pair2d kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;

 protected:
  Tensor forward(const Tensor& x) override;
};

// torch.nn.Flatten: dims start_dim..end_dim merged (by default all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  std::string name() const override { return "Flatten"; }
  int64_t start_dim, end_dim;

 protected:
  Tensor forward(const Tensor& x) override;
};

class ReLU : public Module {
 public:
  std::string name() const override { return "ReLU"; }

 protected:
  Tensor forward(const Tensor& x) override;
};

class GELU : public Module {  // tanh approximation, as GPT-2
 public:
  std::string name() const override { return "GELU"; }

 protected:
  Tensor forward(const Tensor& x) override;
};

class Tanh : public Module {
 public:
  std::string name() const override { return "Tanh"; }

 protected:
  Tensor forward(const Tensor& x) override;
};

// "relu" | "gelu" | "tanh" -> a new activation module; reel::Error naming the choices otherwise.
std::shared_ptr<Module> make_activation(const std::string& name);

}  // namespace reel::nn
