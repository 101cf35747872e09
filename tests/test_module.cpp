// nn::Module and the basic layers: parameter registration and names, train/eval, to(device),
// state_dict round trips and their errors, safetensors save/load, checkpoint policies, the layers
// against the ops they wrap, forward hooks (on Sequential children, checkpointed or not; their
// order; remove()) and named_modules(); BatchNorm's device-side batch count (eval and failed
// forwards not counted, state_dict round trips, a CUDA graph's replays counting, momentum None
// refused under a capture).
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;
using reel::testing::check_close;
using reel::testing::values;

namespace {

struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
  std::shared_ptr<nn::ReLU> act = register_module("act", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2));
  Tensor scale = register_parameter("scale", ones({2}));
  std::string name() const override { return "Net"; }

 protected:
  Tensor forward(const Tensor& x) override { return (*fc2)((*act)((*fc1)(x))) * scale; }
};

// Two modules holding one tensor (as a tied LM head holds the embedding).
struct Tied : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(5, 3));
  Tensor head = register_parameter("head", emb->weight);
  std::string name() const override { return "Tied"; }

 protected:
  Tensor forward(const Tensor& ids) override { return linear((*emb)(ids), head); }
};

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

std::string temp_path(const std::string& name) { return "test_module_" + name + ".safetensors"; }

}  // namespace

TEST_CASE("parameters register under dotted names, depth first, once each") {
  manual_seed(1);
  const int64_t before = memory_stats(Device::cpu())[Category::Parameter].current_bytes;
  Net net;
  CHECK(names_of(net) == std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(net.num_parameters() == 2 + 4 * 3 + 3 + 3 * 2 + 2);
  for (const Tensor& p : net.parameters()) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
    CHECK(p.storage()->category() == Category::Parameter);
  }
  CHECK(memory_stats(Device::cpu())[Category::Parameter].current_bytes - before >= 25 * 4);
  CHECK(net.fc1->weight.shape() == Shape{3, 4});  // (out, in), as torch.nn.Linear

  nn::MLP mlp({4, 8, 8, 2});
  CHECK(names_of(mlp) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"});
  CHECK(mlp.size() == 5);
  CHECK(mlp[1].name() == "ReLU");

  Tied tied;  // the shared tensor is listed once, under its first name
  CHECK(names_of(tied) == std::vector<std::string>{"head"});
  CHECK(tied.state_dict().size() == 1);
}

TEST_CASE("registration errors name the module and the key") {
  struct Bad : nn::Module {
    std::string name() const override { return "Bad"; }
    void add(const std::string& n) { register_parameter(n, zeros({2})); }
    void add_child(const std::string& n) { register_module(n, std::make_shared<nn::ReLU>()); }

   protected:
    Tensor forward(const Tensor& x) override { return x; }
  };
  Bad bad;
  bad.add("w");
  CHECK_REEL_ERROR(bad.add("w"), "Bad: parameter 'w' registered twice");
  CHECK_REEL_ERROR(bad.add("a.b"), "without '.'");
  CHECK_REEL_ERROR(bad.add(""), "non-empty");
  bad.add_child("r");
  CHECK_REEL_ERROR(bad.add_child("r"), "module 'r' registered twice");
  CHECK_REEL_ERROR(nn::Linear(0, 3), "Linear: features must be positive");
  CHECK_REEL_ERROR(nn::Dropout(1.0), "Dropout: p must be in [0, 1)");
  CHECK_REEL_ERROR(nn::make_activation("swish"), "unknown activation 'swish'");
  CHECK_REEL_ERROR(nn::MLP({4}), "MLP: needs at least");
}

TEST_CASE("train and eval reach every descendant; Dropout is the identity in eval") {
  manual_seed(2);
  nn::MLP mlp({6, 16, 6}, "relu", 0.5);
  CHECK(mlp.training());
  mlp.eval();
  for (const auto& [name, child] : mlp.children()) CHECK_FALSE(child->training());
  const Tensor x = randn({4, 6});
  check_close(mlp(x), mlp(x), 0, 0);  // no dropout: the same twice
  nn::Dropout drop(0.5);
  drop.eval();
  check_close(drop(x), x, 0, 0);
  drop.train();
  const std::vector<double> y = values(drop(x)), xv = values(x);
  int zeros_seen = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) ++zeros_seen;
    else CHECK(y[i] == doctest::Approx(2 * xv[i]));
  }
  CHECK(zeros_seen > 0);
}

TEST_CASE("state_dict round trip, and load errors list every bad key without copying anything") {
  manual_seed(3);
  Net a;
  manual_seed(4);
  Net b;
  b.load_state_dict(a.state_dict());
  for (const auto& [name, p] : a.named_parameters()) check_close(b.state_dict().at(name), p, 0, 0);

  // state_dict holds the parameters themselves: writing through it writes the model.
  a.state_dict().at("scale").fill_(3.0);
  CHECK(values(a.scale) == std::vector<double>{3.0, 3.0});

  manual_seed(5);
  Net c;
  const std::vector<double> before = values(c.fc1->weight);
  nn::TensorDict bad = a.state_dict();
  bad.erase("fc2.bias");
  bad["fc1.weight"] = zeros({4, 3});
  bad["extra"] = zeros({1});
  try {
    c.load_state_dict(bad);
    FAIL("load_state_dict accepted a bad dict");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("Net.load_state_dict: 3 problem(s)") != std::string::npos);
    CHECK(msg.find("missing key 'fc2.bias' (2)") != std::string::npos);
    CHECK(msg.find("key 'fc1.weight' has shape (4, 3), the parameter (3, 4)") != std::string::npos);
    CHECK(msg.find("unexpected key 'extra' (1)") != std::string::npos);
  }
  CHECK(values(c.fc1->weight) == before);

  // Values of another dtype convert; integer tensors are refused.
  nn::TensorDict f64 = a.state_dict();
  for (auto& [name, t] : f64) t = t.to(DType::f64);
  c.load_state_dict(f64);
  check_close(c.fc1->weight, a.fc1->weight, 0, 0);
  f64["scale"] = zeros({2}, DType::i32);
  CHECK_REEL_ERROR(c.load_state_dict(f64), "key 'scale' is i32");
}

TEST_CASE("save and load through a safetensors file") {
  manual_seed(6);
  nn::MLP a({5, 7, 3});
  const std::string path = temp_path("mlp");
  nn::save(a, path, {{"epoch", "3"}});
  const nn::TensorDict file = nn::load_safetensors(path);
  CHECK(file.size() == 4);
  CHECK(file.at("0.weight").shape() == Shape{7, 5});
  manual_seed(7);
  nn::MLP b({5, 7, 3});
  nn::Metadata meta;
  nn::load(b, path, &meta);
  CHECK(meta.at("epoch") == "3");
  const Tensor x = randn({2, 5});
  check_close(b(x), a(x), 0, 0);
  nn::MLP wrong({5, 8, 3});
  CHECK_REEL_ERROR(nn::load(wrong, path), "key '0.weight' has shape (7, 5), the parameter (8, 5)");
  std::remove(path.c_str());
}

TEST_CASE("to(device) moves every parameter in place: earlier handles follow") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(8);
    Net net;
    const Tensor x = randn({3, 4});
    const Tensor expected = net(x);
    const std::vector<Tensor> handles = net.parameters();  // as an optimizer holds them
    autograd::backward(sum(net(x)));
    net.to(device);
    for (const Tensor& p : handles) {
      CHECK(p.device() == device);
      CHECK(p.grad().device() == device);
      CHECK(p.requires_grad());
    }
    check_close(net(x.to(device)), expected, 1e-5, 1e-6);
    net.to(Device::cpu());
    check_close(net(x), expected, 0, 0);
  }
}

TEST_CASE("a forward left on the tape (inference in grad mode) does not disturb a later backward") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(12);
    Net stale;
    const Tensor x = randn({3, 4});
    autograd::backward(sum(stale(x)));  // .grad buffers on the cpu
    const Tensor unused = stale(x);     // recorded, never backwarded
    stale.to(device);                   // parameters and .grad move; the stale node still names the cpu
    manual_seed(12);
    Net fresh;
    fresh.to(device);
    autograd::backward(sum(fresh(x.to(device))));
    CHECK(fresh.fc1->weight.grad().device() == device);
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("backward refuses parameters moved to another device after the forward") {
  for (const Device& device : reel::testing::devices()) {
    if (device == Device::cpu()) continue;
    CAPTURE(device);
    const std::string cpu = "from " + Device::cpu().str() + " to " + device.str();
    const std::string back = "from " + device.str() + " to " + Device::cpu().str();
    manual_seed(21);
    Net net;
    const Tensor x = randn({3, 4});
    // No .grad buffer yet: the gradient would be made on the cpu for a parameter now elsewhere.
    Tensor loss = sum(net(x));
    net.to(device);
    // The walk meets `scale` (2) first, as an input of the last mul.
    CHECK_REEL_ERROR(autograd::backward(loss), "backward: parameter (2) f32 (an input of mul) was moved");
    CHECK_REEL_ERROR(autograd::backward(loss), cpu.c_str());
    for (const Tensor& p : net.parameters()) CHECK(!p.grad().defined());  // nothing was accumulated
    // A later forward on the new device trains as usual, and so does one moved back and forth
    // before its backward.
    autograd::backward(sum(net(x.to(device))));
    for (const Tensor& p : net.parameters()) CHECK(p.grad().device() == device);
    loss = sum(net(x.to(device)));
    net.to(Device::cpu());
    net.to(device);
    autograd::backward(loss);
    // With .grad buffers (moved along, so no stale buffer is reported): the buffers keep their values.
    const std::vector<double> before = values(net.fc2->weight.grad());
    loss = sum(net(x.to(device)));
    net.to(Device::cpu());
    CHECK_REEL_ERROR(autograd::backward(loss), "backward: parameter (2) f32 (an input of mul) was moved");
    CHECK_REEL_ERROR(autograd::backward(loss), back.c_str());
    CHECK(values(net.fc2->weight.grad()) == before);
    autograd::Tape::current().clear();
    autograd::backward(sum(net(x)));
    CHECK(net.fc1->weight.grad().device() == Device::cpu());
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("loading from a directory says it is a directory") {
  Net net;
  CHECK_REEL_ERROR(nn::load(net, "."), "load_safetensors: '.' is a directory, not a safetensors file");
}

TEST_CASE("layers compute what their ops compute, with torch's initialisation") {
  manual_seed(9);
  nn::Linear fc(16, 4);
  const double bound = 1.0 / std::sqrt(16.0);
  for (double w : values(fc.weight)) CHECK(std::fabs(w) <= bound);
  for (double b : values(fc.bias)) CHECK(std::fabs(b) <= bound);
  const Tensor x = randn({2, 3, 16});
  check_close(fc(x), add(matmul(x, fc.weight, false, true), fc.bias), 1e-5, 1e-6);
  nn::Linear no_bias(16, 4, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.named_parameters().size() == 1);

  nn::LayerNorm ln(16);
  CHECK(values(ln.weight) == std::vector<double>(16, 1.0));
  CHECK(values(ln.bias) == std::vector<double>(16, 0.0));
  check_close(ln(x), layer_norm(x, ln.weight, ln.bias), 0, 0);
  nn::RMSNorm rms(16);
  check_close(rms(x), rms_norm(x, rms.weight), 0, 0);
  nn::GroupNorm gn(2, 6);
  CHECK(values(gn.weight) == std::vector<double>(6, 1.0));
  CHECK(values(gn.bias) == std::vector<double>(6, 0.0));
  const Tensor images = randn({2, 6, 3, 3});
  check_close(gn(images), group_norm(images, 2, gn.weight, gn.bias), 0, 0);
  CHECK(nn::GroupNorm(3, 6, 1e-5, false).named_parameters().empty());
  CHECK_REEL_ERROR(nn::GroupNorm(4, 6), "GroupNorm: 4 groups must divide the 6 channels");
  nn::MaxPool2d mp(3, 2, 1);
  CHECK(mp.named_parameters().empty());
  CHECK(mp.name() == "MaxPool2d");
  check_close(mp(images), max_pool2d(images, 3, 2, 1), 0, 0);
  CHECK(mp(images).shape() == (Shape{2, 6, 2, 2}));
  nn::MaxPool2d mp_default(2);  // stride = kernel_size, as PyTorch
  CHECK(mp_default.stride.v == (std::array<int64_t, 2>{2, 2}));
  check_close(nn::MaxPool2d({2, 1}, 1, 0, {1, 2})(images), max_pool2d(images, Pair2d(2, 1), 1, 0, Pair2d(1, 2)), 0, 0);
  nn::AvgPool2d ap(2, 1);
  CHECK(ap.named_parameters().empty());
  check_close(ap(images), avg_pool2d(images, 2, 1), 0, 0);
  CHECK(nn::AvgPool2d(3).stride.v == (std::array<int64_t, 2>{3, 3}));
  // ceil_mode and count_include_pad, PyTorch's names and defaults; unbatched (C, H, W) input.
  CHECK((!mp.ceil_mode && !ap.ceil_mode && ap.count_include_pad));
  nn::MaxPool2d mp_ceil(2, 2, 0, 1, true);
  CHECK(mp_ceil(images).shape() == (Shape{2, 6, 2, 2}));  // floor: (1, 1)
  check_close(mp_ceil(images), max_pool2d(images, 2, 2, 0, 1, true), 0, 0);
  nn::AvgPool2d ap_ceil(2, 2, 1, true, false);
  CHECK(ap_ceil(images).shape() == (Shape{2, 6, 2, 2}));
  check_close(ap_ceil(images), avg_pool2d(images, 2, 2, 1, true, false), 0, 0);
  const Tensor image = randn({6, 3, 3});
  CHECK(mp(image).shape() == (Shape{6, 2, 2}));
  CHECK(ap_ceil(image).shape() == (Shape{6, 2, 2}));
  check_close(ap_ceil(image), reshape(ap_ceil(reshape(image, {1, 6, 3, 3})), {6, 2, 2}), 0, 0);
  CHECK(nn::Flatten()(images).shape() == (Shape{2, 54}));
  CHECK(nn::Flatten(0, 1)(images).shape() == (Shape{12, 3, 3}));
  CHECK(nn::Flatten(-2)(images).shape() == (Shape{2, 6, 9}));
  CHECK(nn::Flatten().named_parameters().empty());
  CHECK_REEL_ERROR(nn::Flatten(2, 1)(images), "flatten: dims 2..1 do not name an ordered range");
  CHECK_REEL_ERROR(nn::MaxPool2d(4)(images), "max_pool2d_forward: kernel_size (4, 4) with dilation (1, 1) is larger");
  CHECK_REEL_ERROR(nn::AvgPool2d(2, 2, 2)(images), "avg_pool2d_forward: padding (2, 2) must be in [0, kernel_size / 2]");

  nn::Embedding emb(10, 5);
  const Tensor ids = from_vector<int64_t>({1, 9, 1}, {3});
  const std::vector<double> rows = values(emb(ids)), table = values(emb.weight);
  for (int64_t c = 0; c < 5; ++c) {
    CHECK(rows[static_cast<size_t>(c)] == table[static_cast<size_t>(5 + c)]);
    CHECK(rows[static_cast<size_t>(5 + c)] == table[static_cast<size_t>(45 + c)]);
  }
  CHECK_REEL_ERROR(emb(from_vector<int64_t>({10}, {1})), "embedding");
  CHECK_REEL_ERROR(fc(randn({2, 15})), "linear");
  check_close(nn::GELU()(x), gelu(x), 0, 0);
  check_close(nn::Tanh()(x), tanh(x), 0, 0);
  check_close(nn::ReLU()(x), relu(x), 0, 0);
  CHECK(nn::MLP({16, 4}).str().find("MLP") == 0);
}

TEST_CASE("Conv2d: torch's parameter names, layout and initialisation; forward is conv2d with its options") {
  nn::Conv2d conv(4, 6, 3, 2, 1, 1, 2);  // in 4, out 6, 3x3, stride 2, padding 1, dilation 1, 2 groups
  const auto params = conv.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[0].second.shape() == (Shape{6, 2, 3, 3}));  // (out, in / groups, kH, kW)
  CHECK(params[1].first == "bias");
  CHECK(params[1].second.shape() == (Shape{6}));
  const double bound = 1.0 / std::sqrt(2.0 * 3 * 3);  // fan_in = in / groups * kH * kW
  double largest = 0;
  for (double w : values(conv.weight)) largest = std::max(largest, std::fabs(w));
  CHECK(largest <= bound);
  CHECK(largest > 0.5 * bound);  // 108 uniform draws fill the range, not a narrower one
  for (double b : values(conv.bias)) CHECK(std::fabs(b) <= bound);
  const Tensor images = randn({2, 4, 7, 5});
  const Tensor y = conv(images);
  CHECK(y.shape() == (Shape{2, 6, 4, 3}));
  check_close(y, conv2d(images, conv.weight, conv.bias, 2, 1, 1, 2), 0, 0);
  nn::Conv2d rect(4, 2, {3, 1}, 1, {1, 0}, {2, 1}, 1, false);
  CHECK_FALSE(rect.bias.defined());
  CHECK(rect.named_parameters().size() == 1);
  CHECK(rect.weight.shape() == (Shape{2, 4, 3, 1}));
  check_close(rect(images), conv2d(images, rect.weight, Tensor(), 1, Pair2d(1, 0), Pair2d(2, 1)), 0, 0);
  CHECK(rect(images).shape() == (Shape{2, 2, 5, 5}));
  CHECK_REEL_ERROR(nn::Conv2d(4, 6, 3, 1, 0, 1, 4), "Conv2d: groups 4 must divide in_channels 4 and out_channels 6");
  CHECK_REEL_ERROR(nn::Conv2d(3, 6, 3)(images),
                   "conv2d_forward: weight (6, 3, 3, 3) does not match the 4 input channels");
  CHECK_REEL_ERROR(nn::Conv2d(4, 6, 9)(images), "conv2d_forward: kernel (9, 9) with dilation (1, 1) is larger than x");
}

TEST_CASE("checkpoint policies: parsing and the runs they plan") {
  using P = nn::CheckpointPolicy;
  auto runs = [](const std::string& text, int64_t n) {
    std::string out;
    for (const P::Run& r : P::parse(text).plan(n))
      out += "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + (r.checkpointed ? ")c " : ") ");
    return out;
  };
  CHECK(runs("none", 4) == "[0,4) ");
  CHECK(runs("every:2", 5) == "[0,2)c [2,4)c [4,5) ");
  CHECK(runs("every:1", 3) == "[0,1)c [1,2)c [2,3) ");
  CHECK(runs("sqrt", 9) == "[0,3)c [3,6)c [6,9) ");
  CHECK(runs("sqrt", 5) == "[0,3)c [3,5) ");
  CHECK(runs("sqrt", 1) == "[0,1) ");
  // Runs of floor(sqrt n) where they recompute no more than runs of ceil(sqrt n): 3 and 8 take
  // the shorter runs (same blocks recomputed, fewer saves held at once), 5, 2 and 12 the longer.
  CHECK(runs("sqrt", 3) == "[0,1)c [1,2)c [2,3) ");
  CHECK(runs("sqrt", 8) == "[0,2)c [2,4)c [4,6)c [6,8) ");
  CHECK(runs("sqrt", 2) == "[0,2) ");
  CHECK(runs("sqrt", 12) == "[0,4)c [4,8)c [8,12) ");
  for (int64_t n = 1; n <= 400; ++n) {
    CAPTURE(n);
    const auto recomputed_and_longest = [n](int64_t k) {  // the plan of runs of k, as every:k makes it
      int64_t recomputed = 0, longest = 0;
      for (const P::Run& r : P::parse("every:" + std::to_string(k)).plan(n)) {
        recomputed += r.checkpointed ? r.end - r.begin : 0;
        longest = std::max(longest, r.end - r.begin);
      }
      return std::make_pair(recomputed, longest);
    };
    const int64_t ceil_k = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
    const std::vector<P::Run> plan = P::parse("sqrt").plan(n);
    int64_t recomputed = 0, longest = 0;
    for (const P::Run& r : plan) {
      recomputed += r.checkpointed ? r.end - r.begin : 0;
      longest = std::max(longest, r.end - r.begin);
    }
    CHECK(recomputed <= recomputed_and_longest(ceil_k).first);  // never more recompute than ceil(sqrt n) runs
    CHECK(longest <= ceil_k);                                   // never a longer run
    CHECK(longest * longest <= n + 2 * ceil_k);                 // about sqrt n units a run...
    CHECK(static_cast<int64_t>(plan.size()) <= ceil_k + 2);     // ... and about sqrt n runs
  }
  CHECK(runs("list:3,1", 5) == "[0,1) [1,2)c [2,3) [3,4)c [4,5) ");
  CHECK(P::parse("list:2,0,2").str() == "list:0,2");
  CHECK(P::parse("every:4").str() == "every:4");
  CHECK_REEL_ERROR(P::parse("every:0"), "K must be at least 1");
  CHECK_REEL_ERROR(P::parse("every:x"), "'x' is not a whole number");
  CHECK_REEL_ERROR(P::parse("list:1,,2"), "is not a whole number");
  CHECK_REEL_ERROR(P::parse("half"), "'half' is not one of none, every:K, sqrt");
  nn::MLP mlp({4, 4, 4});
  CHECK_REEL_ERROR(mlp.set_checkpoint(P::parse("list:0,3")), "index 3 is out of range for 3 modules");
}

TEST_CASE("a checkpointed Sequential gives bit-identical gradients and keeps fewer activations") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(10);
    nn::MLP mlp({32, 64, 64, 64, 64, 64, 64, 8}, "gelu", 0.25);
    mlp.to(device);
    const Tensor x = randn({16, 32}, DType::f32, device), target = randn({16, 8}, DType::f32, device);
    std::vector<std::vector<double>> grads;
    std::vector<int64_t> saved;  // activation bytes the tape keeps after forward
    for (const std::string policy : {"none", "sqrt", "every:1", "list:0,4"}) {
      CAPTURE(policy);
      mlp.set_checkpoint(nn::CheckpointPolicy::parse(policy));
      default_generator().manual_seed(11);  // the same dropout masks in every run
      const int64_t before = memory_stats(device)[Category::Activation].current_bytes;
      const Tensor loss = sum(mul(mlp(x), target));
      saved.push_back(memory_stats(device)[Category::Activation].current_bytes - before);
      autograd::backward(loss);
      std::vector<double> g;
      for (const Tensor& p : mlp.parameters()) {
        const std::vector<double> v = values(p.grad());
        g.insert(g.end(), v.begin(), v.end());
      }
      grads.push_back(g);
      for (const Tensor& p : mlp.parameters()) p.set_grad(Tensor());
    }
    for (size_t i = 1; i < grads.size(); ++i) CHECK(grads[i] == grads[0]);
    CHECK(saved[1] < saved[0] / 2);  // sqrt: 3 boundaries and the last run of 4 layers, of 19
  }
}

// ---- selective checkpointing and the planner on a real chain (issue 12) ------------------------

namespace {
// N blocks of Sequential(Linear(D, D), GELU, Dropout): each block one child, as the planner counts.
std::shared_ptr<nn::Sequential> block_chain(int n, int64_t d, double dropout) {
  auto chain = std::make_shared<nn::Sequential>();
  for (int i = 0; i < n; ++i)
    chain->push_back(std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(d, d), std::make_shared<nn::GELU>(), std::make_shared<nn::Dropout>(dropout)}));
  return chain;
}
}  // namespace

TEST_CASE("Sequential: selective and planned checkpointing give bit-identical gradients; the peak meets the budget") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(21);
    const int n = 10;
    auto chain = block_chain(n, 16, 0.1);
    chain->to(device);
    const Tensor x = randn({8, 16}, DType::f32, device), target = randn({8, 16}, DType::f32, device);
    auto forward_loss = [&] { return sum(mul(tanh((*chain)(x)), target)); };  // tanh: the head saves
    struct Step {
      std::vector<double> grads;
      int64_t peak;  // the step's activation peak
    };
    auto step = [&] {
      default_generator().manual_seed(12);  // the same dropout masks in every run
      for (const Tensor& p : chain->parameters()) p.set_grad(Tensor());
      const int64_t before = memory_stats(device)[Category::Activation].current_bytes;
      reset_peak_memory(device);
      autograd::backward(forward_loss());
      Step s;
      s.peak = memory_stats(device)[Category::Activation].peak_bytes - before;
      for (const Tensor& p : chain->parameters()) {
        const std::vector<double> v = values(p.grad());
        s.grads.insert(s.grads.end(), v.begin(), v.end());
      }
      return s;
    };
    chain->set_checkpoint(nn::CheckpointPolicy::parse("none"));
    const Step plain = step();
    chain->set_checkpoint(nn::CheckpointPolicy::parse("selective"));
    const Step selective = step();
    CHECK(selective.grads == plain.grads);
    CHECK(selective.peak < plain.peak * 6 / 10);

    // Budget: before planning, forward refuses; the plan's prediction is met by the measurement.
    chain->set_checkpoint(nn::CheckpointPolicy::budget(plain.peak));
    CHECK_REEL_ERROR(forward_loss(), "has no plan yet; call plan_checkpoint(forward_loss)");
    default_generator().manual_seed(5);
    const uint64_t offset = default_generator().offset();
    const autograd::CheckpointPlan& generous = chain->plan_checkpoint(forward_loss);
    CHECK(default_generator().offset() == offset);  // the measuring forwards drew no dropout streams
    CHECK(generous.predicted.recompute_ns == 0);
    CHECK(generous.plain_peak_bytes == plain.peak);  // the model's plain peak is the measured one
    const int64_t least = generous.least_peak_bytes;
    CHECK(least < plain.peak / 3);
    for (int k = 0; k <= 6; ++k) {
      const int64_t budget = least + (plain.peak - least) * k / 6;
      CAPTURE(budget);
      chain->set_checkpoint(nn::CheckpointPolicy::budget(budget));
      const autograd::CheckpointPlan& plan = chain->plan_checkpoint(forward_loss);
      CAPTURE(plan.str());
      CHECK(plan.predicted.peak_bytes <= budget);
      const Step planned = step();
      CHECK(planned.peak <= budget);
      CHECK(planned.peak <= plan.predicted.peak_bytes);
      CHECK(planned.grads == plain.grads);
    }
    // A plan made earlier runs again as it was; one for another chain is refused.
    {
      chain->set_checkpoint(nn::CheckpointPolicy::budget((least + plain.peak) / 2));
      const autograd::CheckpointPlan plan = chain->plan_checkpoint(forward_loss);
      chain->set_checkpoint(nn::CheckpointPolicy::parse("none"));
      chain->use_checkpoint_plan(plan);
      CHECK(chain->checkpoint().budget_bytes == plan.budget_bytes);
      const Step again = step();
      CHECK(again.peak <= plan.predicted.peak_bytes);
      CHECK(again.grads == plain.grads);
      autograd::CheckpointPlan other = plan;
      other.runs.back().end += 1;
      CHECK_REEL_ERROR(chain->use_checkpoint_plan(other), "the plan covers 11 children, this Sequential has 10");
    }
    chain->set_checkpoint(nn::CheckpointPolicy::budget(least - 1));
    CHECK_REEL_ERROR(chain->plan_checkpoint(forward_loss), "the least activation peak any plan reaches");
    chain->set_checkpoint(nn::CheckpointPolicy::parse("sqrt"));
    CHECK_REEL_ERROR(chain->plan_checkpoint(forward_loss), "not a budget (budget:SIZE)");
    chain->set_checkpoint(nn::CheckpointPolicy::budget(plain.peak));
    {
      Profiler prof;
      CHECK_REEL_ERROR(chain->plan_checkpoint(forward_loss), "a Profiler is collecting");
    }
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("BatchNorm1d/2d: PyTorch's parameter and buffer names, shapes, and what is trained") {
  nn::Sequential net({std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3)});
  std::vector<std::string> params, buffers;
  for (const auto& [name, p] : net.named_parameters()) params.push_back(name + shape_str(p.shape()));
  for (const auto& [name, b] : net.named_buffers()) buffers.push_back(name + shape_str(b.shape()));
  CHECK(params == std::vector<std::string>{"0.weight(3, 4)", "0.bias(3)", "1.weight(3)", "1.bias(3)"});
  CHECK(buffers == std::vector<std::string>{"1.running_mean(3)", "1.running_var(3)", "1.num_batches_tracked()"});
  CHECK(net.parameters().size() == 4);  // an optimizer never sees the buffers
  const nn::TensorDict state = net.state_dict();
  CHECK(state.size() == 7);
  CHECK(state.at("1.num_batches_tracked").dtype() == DType::i64);
  CHECK(values(state.at("1.running_var")) == std::vector<double>{1, 1, 1});
  for (const auto& [name, b] : net.named_buffers()) CHECK_FALSE(b.requires_grad());
  nn::BatchNorm2d bn(5);
  CHECK(values(bn.weight) == std::vector<double>(5, 1.0));
  CHECK(values(bn.bias) == std::vector<double>(5, 0.0));
  CHECK(values(bn.running_mean) == std::vector<double>(5, 0.0));
  CHECK(nn::BatchNorm2d(5, 1e-5, 0.1, false).named_parameters().empty());
  CHECK(nn::BatchNorm2d(5, 1e-5, 0.1, true, false).named_buffers().empty());
  CHECK_REEL_ERROR(nn::BatchNorm1d(0), "BatchNorm: num_features must be positive");
  CHECK_REEL_ERROR(bn(zeros({2, 5, 3})), "BatchNorm2d: expected 4D input (got 3D input (2, 5, 3))");
  CHECK_REEL_ERROR(nn::BatchNorm1d(5)(zeros({2, 5, 3, 1})), "BatchNorm1d: expected 2D or 3D input (got 4D input");
  CHECK_REEL_ERROR(bn(zeros({2, 4, 3, 3})), "batch_norm: weight (5) does not match the 4 channels");
  CHECK_REEL_ERROR(nn::BatchNorm2d(5, 1e-5, 0.1, false)(zeros({2, 4, 3, 3})),
                   "batch_norm: running_mean (5) does not match the 4 channels");
  CHECK(values(bn.num_batches_tracked) == std::vector<double>{0});  // failed forwards count nothing
}

TEST_CASE("BatchNorm: train() updates the running statistics and the batch count, eval() uses them") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(30);
    nn::BatchNorm2d bn(3);
    bn.to(device);
    nn::init_normal_(bn.weight, 0.5);
    const Tensor x1 = (randn({4, 3, 2, 2}) * 2.0 + 1.0).to(device), x2 = randn({4, 3, 2, 2}).to(device);
    // Train: the batch's statistics, as the functional op with the same (fresh) running statistics.
    Tensor rm = zeros({3}, DType::f32, device), rv = ones({3}, DType::f32, device);
    const Tensor y1 = bn(x1);
    check_close(y1, batch_norm(x1, rm, rv, bn.weight, bn.bias, true, 0.1), 0, 0);
    check_close(bn.running_mean, rm, 0, 0);
    check_close(bn.running_var, rv, 0, 0);
    bn(x2);
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{2});
    // Eval: the running statistics, which stay where they are.
    bn.eval();
    const std::vector<double> rm_before = values(bn.running_mean);
    batch_norm(x2, rm, rv, bn.weight, bn.bias, true, 0.1);  // the reference statistics follow
    check_close(bn(x1), batch_norm(x1, rm, rv, bn.weight, bn.bias), 0, 0);
    CHECK(values(bn.running_mean) == rm_before);
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{2});
    // momentum nullopt: the cumulative average of the batch statistics.
    nn::BatchNorm1d avg(3, 1e-5, std::nullopt);
    avg.to(device);
    const Tensor a = randn({5, 3}).to(device), b = (randn({5, 3}) + 3.0).to(device);
    avg(a);
    avg(b);
    check_close(avg.running_mean, (mean(a, {0}) + mean(b, {0})) * 0.5, 1e-6, 1e-6);
    // Without running statistics it normalises with the batch's in eval too.
    nn::BatchNorm1d untracked(3, 1e-5, 0.1, true, false);
    untracked.to(device);
    untracked.eval();
    check_close(untracked(a), batch_norm(a, Tensor(), Tensor(), untracked.weight, untracked.bias, true), 0, 0);
  }
}

TEST_CASE("BatchNorm: running statistics and the batch count save and load through safetensors") {
  manual_seed(31);
  nn::BatchNorm2d a(4);
  nn::init_normal_(a.weight, 1.0);
  for (int i = 0; i < 3; ++i) a(randn({2, 4, 3, 3}) * static_cast<double>(i + 1));
  const std::string path = temp_path("batchnorm");
  nn::save(a, path);
  const nn::TensorDict file = nn::load_safetensors(path);
  CHECK(file.size() == 5);
  CHECK(file.at("num_batches_tracked").dtype() == DType::i64);
  CHECK(values(file.at("num_batches_tracked")) == std::vector<double>{3});
  nn::BatchNorm2d b(4);
  nn::load(b, path);
  for (const char* name : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
    check_close(b.state_dict().at(name), a.state_dict().at(name), 0, 0);
  a.eval();
  b.eval();
  const Tensor x = randn({2, 4, 3, 3});
  check_close(b(x), a(x), 0, 0);
  // The loaded count continues (it was written under the module: read back, not the old 0).
  b.train();
  b(x);
  CHECK(values(b.num_batches_tracked) == std::vector<double>{4});
  // A float buffer is not loaded from integers, nor the count from floats.
  nn::TensorDict bad = a.state_dict();
  bad["num_batches_tracked"] = zeros({});
  CHECK_REEL_ERROR(b.load_state_dict(bad), "key 'num_batches_tracked' is f32, the buffer i64");
  std::remove(path.c_str());
}

TEST_CASE("BatchNorm counts on its device: training forwards count, eval and failed ones do not") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(32);
    nn::BatchNorm2d bn(3);
    bn.to(device);
    const Tensor x = randn({4, 3, 2, 2}).to(device);
    uint64_t version = bn.num_batches_tracked.version();
    for (int i = 0; i < 5; ++i) {
      bn(x);
      CHECK(bn.num_batches_tracked.version() > version);  // written in place: a saved copy sees it
      version = bn.num_batches_tracked.version();
    }
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{5});
    CHECK(values(bn.state_dict().at("num_batches_tracked")) == std::vector<double>{5});
    CHECK(bn.num_batches_tracked.device() == device);
    bn.eval();
    bn(x);
    bn(x);
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{5});
    bn.train();
    CHECK_REEL_ERROR(bn(zeros({2, 4, 3, 3}, DType::f32, device)), "does not match the 4 channels");
    CHECK_REEL_ERROR(bn(zeros({2, 3, 3}, DType::f32, device)), "expected 4D input");
    CHECK_REEL_ERROR(bn(zeros({1, 3, 1, 1}, DType::f32, device)), "Expected more than 1 value per channel");
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{5});
    // momentum None after device-only counting: the factor is 1 / 6, from the device's count.
    const Tensor rm = bn.running_mean.clone(), rv = bn.running_var.clone();
    bn.momentum = std::nullopt;
    const Tensor y = bn(x);
    check_close(y, batch_norm(x, rm, rv, bn.weight, bn.bias, true, 1.0 / 6.0), 0, 0);
    check_close(bn.running_mean, rm, 0, 0);
    check_close(bn.running_var, rv, 0, 0);
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{6});
    // ... and back to a momentum, then None again: the count read back once more (7, then 1 / 8).
    bn.momentum = 0.1;
    bn(x);
    bn.momentum = std::nullopt;
    const Tensor rm7 = bn.running_mean.clone(), rv7 = bn.running_var.clone();
    bn(x);
    batch_norm(x, rm7, rv7, bn.weight, bn.bias, true, 1.0 / 8.0);
    check_close(bn.running_mean, rm7, 0, 0);
    CHECK(values(bn.num_batches_tracked) == std::vector<double>{8});
  }
}

TEST_CASE("BatchNorm's device count: state_dict and load_state_dict round trip, the loaded count continues") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    for (bool cumulative : {false, true}) {
      CAPTURE(cumulative);
      manual_seed(33);
      const std::optional<double> momentum = cumulative ? std::nullopt : std::optional<double>(0.1);
      nn::BatchNorm1d a(4, 1e-5, momentum), b(4, 1e-5, momentum);
      a.to(device);
      b.to(device);
      const Tensor x = randn({6, 4}).to(device);
      for (int i = 0; i < 3; ++i) a(x * static_cast<double>(i + 1));
      b(x);  // b counted (and, for None, cached) a count of its own: the load must replace it
      b.load_state_dict(a.state_dict());
      for (const char* name : {"running_mean", "running_var", "num_batches_tracked"})
        check_close(b.state_dict().at(name), a.state_dict().at(name), 0, 0);
      a(x);
      b(x);
      CHECK(values(b.num_batches_tracked) == std::vector<double>{4});
      for (const char* name : {"running_mean", "running_var", "num_batches_tracked"})
        check_close(b.state_dict().at(name), a.state_dict().at(name), 0, 0);
    }
  }
}

TEST_CASE("BatchNorm under a CUDA graph: every replay counts its batch; momentum None is refused") {
  if (cuda_device_count() == 0) return;
  std::vector<Device> graph_devices{Device::cuda(0)};
#if defined(REEL_CUDA_EMULATED)  // the meta device exists in the emulated build only
  graph_devices.push_back(Device::meta());
#endif
  for (const Device& device : graph_devices) {
    CAPTURE(device);
    manual_seed(34);
    nn::BatchNorm2d eager(3), graphed(3);
    eager.to(device);
    graphed.to(device);
    const Tensor x = randn({4, 3, 2, 2}).to(device);
    autograd::NoGrad no_grad;
    for (int i = 0; i < 5; ++i) eager(x);
    graphed(x);  // warm-up: the cache holds the forward's blocks
    CudaGraph graph;
    Tensor y;
    graph.capture(device, [&] { y = graphed(x); });
    if (device.is_meta()) {  // nothing to read on meta: the count kernel is one of the graph's nodes
      Profiler prof;
      graph.replay();
      prof.stop();
      REQUIRE(prof.kernels().size() == 1);
      REQUIRE(prof.kernels()[0].graph_runs);
      int counts = 0;
      for (const auto& run : *prof.kernels()[0].graph_runs) counts += run.kernel == "batch_norm_count" ? 1 : 0;
      CHECK(counts == 1);
      continue;
    }
    CHECK(values(graphed.num_batches_tracked) == std::vector<double>{1});  // captured, not run
    for (int i = 0; i < 4; ++i) graph.replay();
    CHECK(values(graphed.num_batches_tracked) == std::vector<double>{5});
    check_close(graphed.running_mean, eager.running_mean, 0, 0);
    check_close(graphed.running_var, eager.running_var, 0, 0);
    check_close(y, eager(x), 0, 0);  // eager's 6th forward normalises with the batch's statistics too
    // momentum None: the factor 1 / count is a host number a replay would repeat; refused.
    nn::BatchNorm2d avg(3, 1e-5, std::nullopt);
    avg.to(device);
    avg(x);
    CudaGraph refused;
    CHECK_REEL_ERROR(refused.capture(device, [&] { avg(x); }),
                     "BatchNorm2d: momentum=None (the cumulative average) cannot be captured in a CUDA graph");
    CHECK_FALSE(refused.captured());
    avg(x);  // eagerly it still counts from the host's count
    CHECK(values(avg.num_batches_tracked) == std::vector<double>{2});
  }
}

TEST_CASE("a checkpointed Sequential with BatchNorm trains bit-identically: gradients, running stats, count") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    // Linear -> BatchNorm1d -> ReLU -> Linear, and the (N, C, H, W) case: Linear over W ->
    // BatchNorm2d over C -> ReLU -> Linear; three SGD steps per policy, from the same weights.
    for (bool spatial : {false, true}) {
      CAPTURE(spatial);
      std::vector<std::vector<double>> runs;  // per policy: every gradient of every step, then the buffers
      for (const std::string policy : {"none", "every:1", "list:1", "selective"}) {
        CAPTURE(policy);
        manual_seed(40);
        std::shared_ptr<nn::Module> bn = spatial ? std::shared_ptr<nn::Module>(std::make_shared<nn::BatchNorm2d>(3))
                                                 : std::make_shared<nn::BatchNorm1d>(6);
        nn::Sequential net({std::make_shared<nn::Linear>(5, 6), bn, std::make_shared<nn::ReLU>(),
                            std::make_shared<nn::Linear>(6, 2)});
        net.to(device);
        net.set_checkpoint(nn::CheckpointPolicy::parse(policy));
        optim::SGD opt(net.parameters(), 0.1);
        std::vector<double> record;
        Generator data(41);
        for (int step = 0; step < 3; ++step) {
          const Shape xs = spatial ? Shape{4, 3, 2, 5} : Shape{8, 5};
          const Tensor x = randn(xs, DType::f32, Device::cpu(), &data).to(device);
          autograd::backward(sum(net(x) * net(x)));
          for (const Tensor& p : net.parameters()) {
            const std::vector<double> v = values(p.grad());
            record.insert(record.end(), v.begin(), v.end());
          }
          opt.step();
          opt.zero_grad();
        }
        for (const auto& [name, b] : net.named_buffers()) {
          const std::vector<double> v = values(b);
          record.insert(record.end(), v.begin(), v.end());
        }
        runs.push_back(record);
      }
      // Two forwards per step (net(x) * net(x)): 6 batches counted in every run.
      CHECK(runs[0].back() == 6);
      for (size_t i = 1; i < runs.size(); ++i) CHECK(runs[i] == runs[0]);
    }
  }
}

TEST_CASE("plan_checkpoint's measuring forwards leave BatchNorm's running statistics and count as they were") {
  manual_seed(42);
  auto bn = std::make_shared<nn::BatchNorm1d>(16);
  nn::Sequential chain({std::make_shared<nn::Linear>(8, 16), bn, std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(16, 4)});
  const Tensor x = randn({32, 8});
  auto forward_loss = [&] { return sum(chain(x)); };
  chain.set_checkpoint(nn::CheckpointPolicy::budget(int64_t{1} << 30));
  chain.plan_checkpoint(forward_loss);
  CHECK(values(bn->running_mean) == std::vector<double>(16, 0.0));
  CHECK(values(bn->running_var) == std::vector<double>(16, 1.0));
  CHECK(values(bn->num_batches_tracked) == std::vector<double>{0});
  // The step that follows counts from there: one batch, one momentum step.
  autograd::backward(forward_loss());
  CHECK(values(bn->num_batches_tracked) == std::vector<double>{1});
  const Tensor rm = zeros({16}), rv = ones({16});
  {
    autograd::NoGrad no_grad;
    batch_norm(linear(x, chain.parameters()[0], chain.parameters()[1]), rm, rv, Tensor(), Tensor(), true);
  }
  check_close(bn->running_mean, rm, 0, 0);
  check_close(bn->running_var, rv, 0, 0);
}

TEST_CASE("forward hooks on a Sequential child: a pre-hook replaces the input, a forward hook the output") {
  manual_seed(20);
  nn::MLP mlp({4, 6, 3});  // Linear, ReLU, Linear
  const Tensor x = randn({5, 4});
  auto& fc0 = static_cast<nn::Linear&>(mlp[0]);
  auto& fc2 = static_cast<nn::Linear&>(mlp[2]);
  // What the hooks below must make of the chain: fc2(relu(fc0(2 x))) - 1.
  const Tensor expected = linear(relu(linear(x * 2.0, fc0.weight, fc0.bias)), fc2.weight, fc2.bias) - 1.0;
  const Tensor plain = mlp(x);

  int pre_calls = 0, post_calls = 0;
  nn::HookHandle pre = mlp[0].register_forward_pre_hook([&](nn::Module& m, const Tensor& in) {
    ++pre_calls;
    CHECK(&m == &fc0);
    return in * 2.0;
  });
  nn::HookHandle post = mlp[2].register_forward_hook([&](nn::Module& m, const Tensor& in, const Tensor& out) {
    ++post_calls;
    CHECK(&m == &fc2);
    CHECK(in.shape() == (Shape{5, 6}));  // fc2's input: the ReLU's output
    return out - 1.0;
  });
  check_close(mlp(x), expected, 0, 0);
  CHECK(pre_calls == 1);
  CHECK(post_calls == 1);
  // The replacements are recorded ops: the gradient flows through them as through the expression.
  const Tensor xg = x.detach().clone().set_requires_grad();
  autograd::backward(sum(mlp(xg)));
  const Tensor hooked_grad = xg.grad().clone();
  pre.remove();
  post.remove();
  check_close(mlp(x), plain, 0, 0);  // removed: the plain chain again
  CHECK(pre_calls == 2);
  const Tensor xr = x.detach().clone().set_requires_grad();
  autograd::backward(sum(linear(relu(linear(xr * 2.0, fc0.weight, fc0.bias)), fc2.weight, fc2.bias)));
  check_close(hooked_grad, xr.grad(), 0, 0);
}

TEST_CASE("forward hooks run in registration order, each seeing what the one before left") {
  nn::ReLU relu_module;
  std::vector<std::string> order;
  relu_module.register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
    order.push_back("pre1");
    return in + 1.0;
  });
  relu_module.register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) {
    order.push_back("post1");
    check_close(in, std::vector<double>{(-3 + 1) * 3, (2 + 1) * 3}, 0, 0);  // the input forward got
    check_close(out, std::vector<double>{0, 9}, 0, 0);
    return out * 10.0;
  });
  relu_module.register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
    order.push_back("pre2");
    check_close(in, std::vector<double>{-2, 3}, 0, 0);  // pre1's replacement
    return in * 3.0;
  });
  relu_module.register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) {
    order.push_back("post2");
    check_close(out, std::vector<double>{0, 90}, 0, 0);  // post1's replacement
    // returns nothing: an observer keeps the output
  });
  relu_module.register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) -> std::optional<Tensor> {
    order.push_back("post3");
    return std::nullopt;
  });
  const Tensor y = relu_module(from_vector<double>({-3, 2}, {2}));
  check_close(y, std::vector<double>{0, 90}, 0, 0);
  CHECK(order == std::vector<std::string>{"pre1", "pre2", "post1", "post2", "post3"});
}

TEST_CASE("remove() unregisters a hook: once, from inside a hook, and after the module is gone") {
  nn::Tanh tanh_module;
  int a = 0, b = 0;
  nn::HookHandle ha = tanh_module.register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++a; });
  nn::HookHandle hb;
  hb = tanh_module.register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    ++b;
    hb.remove();  // a one-shot hook: gone from the next call on
  });
  const Tensor x = zeros({3});
  tanh_module(x);
  tanh_module(x);
  CHECK(a == 2);
  CHECK(b == 1);
  ha.remove();
  ha.remove();  // idempotent
  tanh_module(x);
  CHECK(a == 2);
  { nn::HookHandle dropped = tanh_module.register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++a; }); }
  tanh_module(x);
  CHECK(a == 3);  // dropping the handle does not remove the hook
  nn::HookHandle outlives;
  {
    nn::ReLU gone;
    outlives = gone.register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++a; });
  }
  outlives.remove();  // the module is destroyed: nothing to do
  nn::HookHandle().remove();  // a default handle: nothing either
  const std::function<std::optional<Tensor>(nn::Module&, const Tensor&)> empty;
  CHECK_REEL_ERROR(tanh_module.register_forward_pre_hook(empty), "Tanh.register_forward_pre_hook: the hook is empty");
}

TEST_CASE("hooks in a checkpointed Sequential run at forward only; gradients match the plain run bit for bit") {
  auto run = [](const nn::CheckpointPolicy& policy, int& calls) {
    manual_seed(21);
    nn::MLP mlp({4, 8, 8, 3});  // children 0..4
    mlp.set_checkpoint(policy);
    mlp[2].register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
      ++calls;
      return in * 0.5;
    });
    mlp[3].register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) {
      ++calls;
      return tanh(out);
    });
    const Tensor x = randn({6, 4});
    autograd::backward(sum(mlp(x)));
    std::vector<double> grads;
    for (const Tensor& p : mlp.parameters())
      for (double g : values(p.grad())) grads.push_back(g);
    return grads;
  };
  int plain_calls = 0, segment_calls = 0;
  const std::vector<double> plain = run(nn::CheckpointPolicy::parse("none"), plain_calls);
  const std::vector<double> segmented = run(nn::CheckpointPolicy::parse("every:1"), segment_calls);
  CHECK(plain_calls == 2);
  CHECK(segment_calls == 2);  // the replay in backward re-runs recorded ops, not the hooks
  CHECK(plain == segmented);
}

TEST_CASE("named_modules: the root as \"\", then every descendant depth first under its dotted name, once") {
  manual_seed(22);
  auto shared = std::make_shared<nn::ReLU>();
  auto inner = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 4), shared});
  nn::Sequential outer({std::make_shared<nn::Linear>(4, 4), inner, std::make_shared<Net>(), shared});
  std::vector<std::string> names, kinds;
  for (const auto& [name, m] : outer.named_modules()) {
    names.push_back(name);
    kinds.push_back(m->name());
  }
  CHECK(names == std::vector<std::string>{"", "0", "1", "1.0", "1.1", "2", "2.fc1", "2.act", "2.fc2"});
  CHECK(kinds == std::vector<std::string>{"Sequential", "Linear", "Sequential", "Linear", "ReLU", "Net", "Linear",
                                          "ReLU", "Linear"});
  CHECK(outer.named_modules().front().second == &outer);
  // The const walk names the same modules; a hook through a found module runs when the model runs.
  const nn::Sequential& const_outer = outer;
  CHECK(const_outer.named_modules().size() == names.size());
  int calls = 0;
  for (const auto& [name, m] : outer.named_modules())
    if (name == "2.fc1") m->register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++calls; });
  outer(randn({2, 4}));
  CHECK(calls == 1);
}
