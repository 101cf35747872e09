// reel against PyTorch, on files PyTorch wrote (tests/data/torch/, made by
// tests/torch_reference/make_fixtures.py with torch 1.13; no torch needed to run this test):
// * BF16 / F16 tensors load bit for bit and reel's writer gives back the same bytes;
// * reel's f32 -> bf16 / f16 conversion rounds every class of value as torch's does, and widening
//   back is exact, bit for bit;
// * one step of a tiny nn::GPT on torch's weights: logits, loss and every gradient against torch's,
//   in f32 and (where autograd/autocast.h exists) under reel's autocast against torch.autocast.
// The reverse direction (PyTorch reading reel's files) is tests/torch_reference/reads_reel.py.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/safetensors.h"
#include "reel.h"
#include "testing.h"

#if __has_include("autograd/autocast.h")
#include "autograd/autocast.h"
#define REEL_TEST_AUTOCAST 1
#endif

using namespace reel;

namespace {

std::string fixture(const std::string& name) { return std::string(REEL_TORCH_DATA) + "/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open ", path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// One tensor of a safetensors file as its writer laid it out: the header's dtype and shape, the raw bytes.
struct RawEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Parsed here independently of nn/safetensors.cpp, so that the comparison does not go through the
// code under test. The fixtures are trusted files: a malformed one fails the REQUIREs.
std::map<std::string, RawEntry> raw_entries(const std::string& file) {
  REQUIRE(file.size() >= 8);
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  REQUIRE(n <= file.size() - 8);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  const std::string data = file.substr(8 + n);
  std::map<std::string, RawEntry> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto begin = it.value()["data_offsets"][0].get<size_t>(), end = it.value()["data_offsets"][1].get<size_t>();
    REQUIRE(begin <= end);
    REQUIRE(end <= data.size());
    out[it.key()] = RawEntry{it.value()["dtype"].get<std::string>(), it.value()["shape"].get<std::vector<int64_t>>(),
                             data.substr(begin, end - begin)};
  }
  return out;
}

std::string tensor_bytes(const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).contiguous();
  return std::string(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.nbytes()));
}

template <typename U>
std::vector<U> bit_patterns(const Tensor& t) {
  REQUIRE(dtype_size(t.dtype()) == sizeof(U));
  const std::string b = tensor_bytes(t);
  std::vector<U> out(b.size() / sizeof(U));
  if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

bool is_nan16(uint16_t h, DType dt) {
  return dt == DType::bf16 ? (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0 : (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
}

std::string hex(uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", bits);
  return buf;
}

}  // namespace

TEST_CASE("PyTorch's BF16 and F16 tensors load bit for bit, and reel's writer gives back the same bytes") {
  const std::string file = read_bytes(fixture("dtypes.safetensors"));
  const std::map<std::string, RawEntry> torch_raw = raw_entries(file);
  REQUIRE(torch_raw.size() == 7);
  const nn::TensorDict loaded = nn::from_safetensors_bytes(file);
  REQUIRE(loaded.size() == torch_raw.size());
  int sixteen = 0;
  for (const auto& entry : torch_raw) {
    const std::string& name = entry.first;
    const RawEntry& raw = entry.second;
    CAPTURE(name);
    const Tensor& t = loaded.at(name);
    CHECK(t.shape() == raw.shape);
    CHECK(std::string(raw.dtype) == (t.dtype() == DType::bf16 ? "BF16" : t.dtype() == DType::f16 ? "F16" : "F32"));
    CHECK(tensor_bytes(t) == raw.bytes);
    sixteen += dtype_size(t.dtype()) == 2;
  }
  CHECK(sixteen == 4);  // torch_bf16, torch_f16, bf16_3d, f16_3d

  // Back out through reel's writer (the file function), and the bytes of each tensor compared with
  // those PyTorch wrote: same dtype name, shape and data.
  const std::string path = "test_torch_interop_rewritten.safetensors";
  nn::save_safetensors(path, loaded, {{"format", "pt"}});
  const std::map<std::string, RawEntry> reel_raw = raw_entries(read_bytes(path));
  std::remove(path.c_str());
  REQUIRE(reel_raw.size() == torch_raw.size());
  for (const auto& entry : torch_raw) {
    const std::string& name = entry.first;
    CAPTURE(name);
    const RawEntry& mine = reel_raw.at(name);
    CHECK(mine.dtype == entry.second.dtype);
    CHECK(mine.shape == entry.second.shape);
    CHECK(mine.bytes == entry.second.bytes);
  }
}

TEST_CASE("reel's f32 -> bf16 / f16 rounds every class of value as PyTorch's does; widening is exact") {
  const nn::TensorDict t = nn::load_safetensors(fixture("dtypes.safetensors"));
  const Tensor& src = t.at("src");  // (rows, 8) f32: every class of value, then normals over many exponents
  REQUIRE(src.dtype() == DType::f32);
  const std::vector<uint32_t> src_bits = bit_patterns<uint32_t>(src);
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dt);
    const std::string tag = dt == DType::bf16 ? "bf16" : "f16";
    const Tensor& theirs = t.at("torch_" + tag);
    REQUIRE(theirs.dtype() == dt);
    for (Device d : reel::testing::devices()) {
      CAPTURE(d);
      const std::vector<uint16_t> mine = bit_patterns<uint16_t>(src.to(d).to(dt));
      const std::vector<uint16_t> ref = bit_patterns<uint16_t>(theirs);
      REQUIRE(mine.size() == ref.size());
      int nans = 0, bad = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        // NaN: both must be NaN, the bits may differ. torch 1.13's CPU conversion makes 0x7FC0 (bf16,
        // scalar path), 0xFFFF (bf16, its AVX2 vector path: position-dependent) or the sign with
        // 0x7E00 (f16); reel keeps the sign and the top payload bits with the quiet bit set.
        if (is_nan16(ref[i], dt)) {
          ++nans;
          if (!is_nan16(mine[i], dt) && bad++ < 8)
            FAIL_CHECK("element " << i << " (f32 " << hex(src_bits[i]) << "): torch NaN, reel " << hex(mine[i]));
        } else if (mine[i] != ref[i] && bad++ < 8) {
          FAIL_CHECK("element " << i << " (f32 " << hex(src_bits[i]) << "): torch " << hex(ref[i]) << ", reel "
                                << hex(mine[i]));
        }
      }
      CHECK(bad == 0);
      CHECK(nans == 5);  // the five NaN sources, so the comparison above is not vacuous
      // Widening torch's 16-bit values: exact, so bit for bit (NaNs included: both keep the payload).
      CHECK(bit_patterns<uint32_t>(theirs.to(d).to(DType::f32)) ==
            bit_patterns<uint32_t>(t.at("torch_" + tag + "_f32")));
      // And through f32 and back, the 3-D tensor's bits come back unchanged (no NaNs there).
      const Tensor& three = t.at(tag + "_3d");
      CHECK(three.dim() == 3);
      CHECK(bit_patterns<uint16_t>(three.to(d).to(DType::f32).to(dt)) == bit_patterns<uint16_t>(three));
    }
  }
}

namespace {

// The tiny GPT of gpt.safetensors, its inputs and torch's results.
struct TorchGPT {
  nn::TensorDict t;
  nn::Metadata meta;
  nn::GPTConfig config;
  TorchGPT() {
    t = nn::load_safetensors(fixture("gpt.safetensors"), Device::cpu(), &meta);
    config.vocab_size = std::stoll(meta.at("vocab_size"));
    config.block_size = std::stoll(meta.at("block_size"));
    config.n_layer = std::stoll(meta.at("n_layer"));
    config.n_head = std::stoll(meta.at("n_head"));
    config.n_embd = std::stoll(meta.at("n_embd"));
  }
  // reel's GPT holding torch's weights: load_state_dict refuses a missing, extra or misshapen name,
  // so this also checks that reel names and lays out every parameter as the torch module does.
  std::shared_ptr<nn::GPT> model(Device d) const {
    auto gpt = std::make_shared<nn::GPT>(config);
    nn::TensorDict state;
    for (const auto& e : t)
      if (e.first.rfind("param.", 0) == 0) state[e.first.substr(6)] = e.second;
    REQUIRE(state.size() == gpt->named_parameters().size());
    gpt->load_state_dict(state);
    gpt->to(d);
    return gpt;
  }
};

struct Step {
  Tensor logits, loss;
  std::vector<std::pair<std::string, Tensor>> grads;
};

// One forward/backward as make_fixtures.py's step(): logits through the LM head, cross-entropy
// (mean over tokens) on them, backward.
Step run_step(nn::GPT& gpt, const Tensor& ids, const Tensor& targets) {
  Step s;
  s.logits = gpt(ids);
  s.loss = cross_entropy(s.logits, targets);
  autograd::backward(s.loss);
  for (const auto& p : gpt.named_parameters()) s.grads.emplace_back(p.first, p.second.grad());
  return s;
}

// max |got - expected| <= tol * max |expected|: the tensor's own scale, since a bf16 rounding error
// is relative to the magnitudes summed into an element, not to the element (which cancellation can make
// arbitrarily small). Returns the ratio max|diff| / max|expected| for the report.
double check_scaled(const std::string& what, const Tensor& got, const Tensor& expected, double tol) {
  CAPTURE(what);
  REQUIRE(got.defined());
  CHECK(got.shape() == expected.shape());
  const std::vector<double> g = reel::testing::values(got), e = reel::testing::values(expected);
  REQUIRE(g.size() == e.size());
  double amax = 0, dmax = 0;
  size_t not_finite = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    amax = std::max(amax, std::fabs(e[i]));
    dmax = std::max(dmax, std::fabs(g[i] - e[i]));
    not_finite += !std::isfinite(g[i]);  // std::max would drop a NaN difference
  }
  CHECK_MESSAGE(not_finite == 0, what, ": ", not_finite, " elements are not finite");
  REQUIRE(amax > 0);
  CHECK_MESSAGE(dmax <= tol * amax, what, ": max |diff| ", dmax, " > ", tol, " x max |torch| ", amax);
  return dmax / amax;
}

}  // namespace

TEST_CASE("a GPT step in f32 on PyTorch's weights: logits, loss and gradients as PyTorch's") {
  const TorchGPT ref;
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    auto gpt = ref.model(d);
    const Step s = run_step(*gpt, ref.t.at("ids").to(d), ref.t.at("targets").to(d));
    // f32 against f32: only the order of the sums differs (reel's GEMM and reductions against
    // OpenBLAS and ATen's), each sum at most 4C = 128 terms deep, a dozen ops deep: well below
    // 2e-5 of each tensor's scale (measured: at most 5e-7, cpu and emulated cuda).
    const double tol = 2e-5;
    check_scaled("logits", s.logits, ref.t.at("logits.f32"), tol);
    CHECK(s.loss.item() == doctest::Approx(ref.t.at("loss.f32").item()).epsilon(1e-6));
    REQUIRE(s.grads.size() == 28);
    double worst = 0;
    for (const auto& g : s.grads)
      worst = std::max(worst, check_scaled(g.first, g.second, ref.t.at("grad.f32." + g.first), tol));
    MESSAGE("f32 vs torch: worst gradient ", worst, " of its scale");
  }
}

#ifdef REEL_TEST_AUTOCAST
TEST_CASE("a GPT step under reel's autocast against torch.autocast(\"cpu\", bfloat16) on the same weights") {
  // The tolerance, in u = 2^-8 (bf16's unit roundoff: 8 significant bits) of each tensor's max |value|.
  // * Both runs are the same f32 model with bf16 roundings in different places. A GEMM rounds both
  //   operands (about 2u per product) and sums in f32 (2^-24 per add, negligible); K <= 4C = 128
  //   terms, whose rounding errors are independent, so a sum's error grows as sqrt(K) u |a||b|, about
  //   u of the sum's scale for the GPT's nearly random inputs; the worst case K u is never approached.
  //   Backward rounds the same way (dY and W, or X). Depth: 2 blocks x 4 GEMMs + the head, and the
  //   chain back; the residual stream carries each block's error forward, unamplified at this init.
  // * Where the policies differ: torch 1.13's CPU autocast runs linear/matmul in bf16 (as reel) but
  //   leaves softmax, GELU and layer_norm in their input's type, so its attention scores and
  //   probabilities are bf16 tensors (a rounding more each, forward and backward) where reel's bf16
  //   attention keeps the softmax in f32; its GELU is bf16 (as reel's elementwise rule); its
  //   layer_norms see the f32 residual and run in f32 (as reel's); cross_entropy is on its fp32 list
  //   (as reel's).
  // * Measured (make_fixtures.py prints it): torch.autocast is 0.8 u (logits) / 2.0 u (worst
  //   gradient) from torch's f32 step; reel's policy written out in casts in torch is 0.8 / 1.9 u
  //   from f32 and 1.0 / 1.3 u from torch.autocast.
  // So 8 u: twice each side's 2 u, with room for reel's kernels rounding in other places than that
  // written-out policy (its fused attention's P, its GEMM's sums). A real bug (a lost cast's gradient,
  // a wrong scale, a transposed weight) is of the order of the tensor's scale, 30x beyond. The loss:
  // cross-entropy's gradient in the logits, softmax - onehot, has 1-norm at most 2 per row, so
  // |d loss| <= 2 max |d logit|.
  const double u = std::ldexp(1.0, -8), tol = 8 * u;
  const TorchGPT ref;
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    auto gpt = ref.model(d);
    const Tensor ids = ref.t.at("ids").to(d), targets = ref.t.at("targets").to(d);
    Step s;
    {
      autograd::Autocast scope(DType::bf16);
      s.logits = (*gpt)(ids);
      s.loss = cross_entropy(s.logits, targets);
    }
    autograd::backward(s.loss);  // outside the region, as torch's
    for (const auto& p : gpt->named_parameters()) s.grads.emplace_back(p.first, p.second.grad());
    CHECK(s.logits.dtype() == DType::bf16);  // the LM head ran in bf16, as torch's (its logits are bf16 too)
    CHECK(s.loss.dtype() == DType::f32);
    const Tensor& torch_logits = ref.t.at("logits.bf16");
    REQUIRE(torch_logits.dtype() == DType::bf16);
    const double logit_err = check_scaled("logits", s.logits, torch_logits, tol);
    double logit_scale = 0;
    for (double x : reel::testing::values(torch_logits)) logit_scale = std::max(logit_scale, std::fabs(x));
    CHECK(std::fabs(s.loss.item() - ref.t.at("loss.bf16").item()) <= 2 * tol * logit_scale);
    double worst = 0, from_f32 = 0;
    for (const auto& g : s.grads) {
      CHECK(g.second.dtype() == DType::f32);  // master weights: f32 parameters, f32 gradients
      worst = std::max(worst, check_scaled(g.first, g.second, ref.t.at("grad.bf16." + g.first), tol));
      const std::vector<double> a = reel::testing::values(g.second);
      const std::vector<double> b = reel::testing::values(ref.t.at("grad.f32." + g.first));
      double amax = 0, dmax = 0;
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        amax = std::max(amax, std::fabs(b[i]));
        dmax = std::max(dmax, std::fabs(a[i] - b[i]));
      }
      from_f32 = std::max(from_f32, dmax / amax);
    }
    // The step really ran in bf16: an f32 step is within 8 u of torch.autocast too (torch's is 2 u
    // from f32), so the tolerance alone would pass it. bf16 roundings move some gradient by about u
    // (torch's: 2 u); the f32 step lands within 5e-7 of torch's (2^-13 u).
    CHECK_MESSAGE(from_f32 > u / 4, "the gradients are ", from_f32 / u, " u from the f32 step's: no bf16 rounding?");
    MESSAGE("autocast bf16 vs torch: logits ", logit_err / u, " u, worst gradient ", worst / u, " u of scale");
  }
}
#endif
