// safetensors: round trips, the byte layout Python's library writes and reads, and every kind of
// corrupt or truncated file raising reel::Error (never a crash or an out-of-bounds read).
#include <cstdio>
#include <cstring>
#include <random>

#include "autograd/tape.h"
#include "nn/safetensors.h"
#include "testing.h"

using namespace reel;
using namespace reel::nn;

namespace {
// A file as Python's writer lays it out, from a header string and raw data bytes.
std::string make_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}
}  // namespace

TEST_CASE("round trip of every dtype, views, empty tensors and metadata") {
  TensorDict in;
  in["w"] = randn({3, 4});
  in["w_t"] = in["w"].t();  // non-contiguous: saved as its logical (4, 3) values
  in["b64"] = arange(5, DType::f64);
  in["ids"] = arange(7, DType::i32);
  in["steps"] = from_vector<int64_t>({1ll << 40, -3}, {2});
  in["empty"] = zeros({0, 3});
  in["scalar"] = scalar_tensor(2.5);
  const std::string path = "test_safetensors_roundtrip.safetensors";
  save_safetensors(path, in, {{"format", "pt"}, {"step", "10"}});
  Metadata meta;
  TensorDict out = load_safetensors(path, Device::cpu(), &meta);
  std::remove(path.c_str());
  CHECK(meta.at("format") == "pt");
  CHECK(meta.at("step") == "10");
  REQUIRE(out.size() == in.size());
  for (const auto& entry : in) {  // not a structured binding: doctest's CAPTURE is a lambda
    const auto& name = entry.first;
    const auto& t = entry.second;
    CAPTURE(name);
    CHECK(out.at(name).shape() == t.shape());
    CHECK(out.at(name).dtype() == t.dtype());
    reel::testing::check_close(out.at(name), t, 0, 0);
  }
}

TEST_CASE("saving tensors that require grad, and views of them, records nothing on the tape") {
  using autograd::Tape;
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor w = randn({3, 4}).to(d).set_requires_grad();
    TensorDict in;
    in["w"] = w;
    in["w_t"] = w.t();               // non-contiguous views of a tensor that requires grad (the
    in["w_cols"] = w.slice(1, 1, 3);  // views themselves are recorded, before the count)
    const size_t nodes = Tape::current().size();
    const std::string bytes = to_safetensors_bytes(in);
    CHECK(Tape::current().size() == nodes);
    const std::string path = "test_safetensors_requires_grad.safetensors";
    save_safetensors(path, in);
    CHECK(Tape::current().size() == nodes);
    TensorDict out = load_safetensors(path, Device::cpu());
    std::remove(path.c_str());
    CHECK(from_safetensors_bytes(bytes, Device::cpu()).size() == in.size());
    for (const auto& entry : in) {
      const auto& name = entry.first;
      const auto& t = entry.second;
      CAPTURE(name);
      CHECK(out.at(name).shape() == t.shape());
      CHECK_FALSE(out.at(name).requires_grad());
      reel::testing::check_close(out.at(name), t.detach(), 0, 0);
    }
    Tape::current().clear();
  }
}

TEST_CASE("the byte layout is the one Python's safetensors writes") {
  TensorDict in;
  in["b"] = tensor({1, 2});
  in["a"] = tensor({3});
  const std::string bytes = to_safetensors_bytes(in);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  CHECK(header.rfind(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 0) == 0);
  CHECK(bytes.size() == 8 + n + 12);
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  CHECK(first == 3.0f);
}

TEST_CASE("a file laid out by another writer loads: key order, metadata, padding") {
  const std::string file = make_file(
      R"({"__metadata__":{"format":"pt"},"layer.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
      R"("layer.bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      floats({0.5f, -0.5f, 1, 2, 3, 4}));
  Metadata meta;
  TensorDict t = from_safetensors_bytes(file, Device::cpu(), &meta);
  CHECK(meta.at("format") == "pt");
  reel::testing::check_close(t.at("layer.bias"), {0.5, -0.5}, 0, 0);
  reel::testing::check_close(t.at("layer.weight"), {1, 2, 3, 4}, 0, 0);
  CHECK(t.at("layer.weight").shape() == Shape{2, 2});
}

TEST_CASE("corrupt files raise reel::Error naming the problem") {
  const std::string ok_header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data = floats({1, 2});
  CHECK_NOTHROW(from_safetensors_bytes(make_file(ok_header, data)));
  CHECK_REEL_ERROR(from_safetensors_bytes("abc"), "too short for the 8-byte header length");
  std::string huge(8, '\0');
  huge[6] = 1;  // header length 2^48
  CHECK_REEL_ERROR(from_safetensors_bytes(huge + "{}"), "goes beyond the end of the file");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file("{\"x\": [", data)), "the header is not valid JSON");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file("[1, 2]", "")), "the header is not a JSON object");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab")),
                   "tensor 'x' has dtype \"F8_E4M3\", which reel does not know");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", "abcd")),
                   "shape (3) of bf16 needs 6 bytes but data_offsets span 4");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)),
                   "shape (3) of f32 needs 12 bytes but data_offsets span 8");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data)),
                   "data_offsets [0, 16] are out of range for 8 bytes of data");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)),
                   "out of range");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data)),
                   "has an invalid dimension");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(
                       R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", data)),
                   "tensor 'x': shape (4294967296, 4294967296, 16) is too large");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F32","shape":[2]}})", data)),
                   "entry 'x' needs dtype, shape and data_offsets");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(
                       R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       data)),
                   "ranges overlap or leave a hole");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data)),
                   "tensor 'x' starts at byte 4 of the data, expected 0");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(ok_header, data + "junk")), "the tensors cover 8 bytes but the data holds 12");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(R"({"__metadata__":{"n":1}})", "")), "__metadata__ value of 'n' is not a string");
  CHECK_REEL_ERROR(load_safetensors("/nonexistent/file.safetensors"), "cannot open '/nonexistent/file.safetensors'");
}

TEST_CASE("every truncation and random byte flips give reel::Error or a valid load, never a crash") {
  TensorDict in;
  in["a"] = randn({4, 5});
  in["b"] = arange(3, DType::i64);
  const std::string bytes = to_safetensors_bytes(in, {{"k", "v"}});
  for (size_t n = 0; n < bytes.size(); ++n) CHECK_THROWS_AS(from_safetensors_bytes(bytes.substr(0, n)), Error);
  std::mt19937 rng(1);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string b = bytes;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    try {
      from_safetensors_bytes(b);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(loaded + rejected == 2000);
  CHECK(rejected > 0);
}

namespace {
// The message of the reel::Error that loading `file` raises ("" when it loads).
std::string load_error(const std::string& file) {
  try {
    from_safetensors_bytes(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a header nested deeper than 64 is refused before parsing") {
  const std::string data = floats({1, 2});
  const auto with_dtype = [&](const std::string& dtype) {
    return make_file(R"({"x":{"dtype":)" + dtype + R"(,"shape":[2],"data_offsets":[0,8]}})", data);
  };
  // 100,000 levels overflowed the stack (in the parser or when the message re-serialised the value).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_REEL_ERROR(from_safetensors_bytes(with_dtype(deep)), "the header nests deeper than 64 levels");
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    return s + "1" + std::string(100000, '}');
  }();
  CHECK_REEL_ERROR(from_safetensors_bytes(with_dtype(deep_objects)), "nests deeper than 64 levels");
  // Unbalanced, too: the check runs before the parser sees the bytes.
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file("{\"x\":" + std::string(70, '['), "")), "nests deeper than 64");
  // The outer object and the entry are two levels: 62 more are allowed, 63 are not.
  CHECK_REEL_ERROR(from_safetensors_bytes(with_dtype(std::string(62, '[') + std::string(62, ']'))),
                   "tensor 'x': dtype is not a string");
  CHECK_REEL_ERROR(from_safetensors_bytes(with_dtype(std::string(63, '[') + std::string(63, ']'))),
                   "nests deeper than 64");
  // Brackets inside strings (escaped quotes included) are not nesting.
  const std::string brackets = std::string(200, '[') + "\\\"" + std::string(200, '{');
  Metadata meta;
  CHECK_NOTHROW(from_safetensors_bytes(
      make_file(R"({"__metadata__":{"k":")" + brackets + R"("},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
      Device::cpu(), &meta));
  CHECK(meta["k"] == std::string(200, '[') + "\"" + std::string(200, '{'));
}

TEST_CASE("messages about a bad value name the key and the expected form, never the value") {
  const std::string data = floats({1, 2});
  const std::string nested = R"([[["F32",{"a":[1,2,3]}]]])";
  const auto file = [&](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return make_file(R"({"x":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}", data);
  };
  std::string e = load_error(file(nested, "[2]", "[0,8]"));
  CHECK(e.find("tensor 'x': dtype is not a string (expected one of F32, F64, BF16, F16, I32, I64)") != std::string::npos);
  CHECK(e.find("[[") == std::string::npos);
  e = load_error(file(R"("F32")", "[2," + nested + "]", "[0,8]"));
  CHECK(e.find("tensor 'x': shape has an invalid dimension at index 1 (expected an array of non-negative integers)") !=
        std::string::npos);
  CHECK(e.find("[[") == std::string::npos);
  e = load_error(file(R"("F32")", "[2]", "[0," + nested + "]"));
  CHECK(e.find("tensor 'x': data_offsets is not a pair of non-negative integers") != std::string::npos);
  CHECK(e.find("[[") == std::string::npos);
  // A string dtype is quoted, cut short when long.
  e = load_error(file("\"" + std::string(10000, 'Q') + "\"", "[2]", "[0,8]"));
  CHECK(e.find("which reel does not know") != std::string::npos);
  CHECK(e.size() < 400);
}

TEST_CASE("a zero-element tensor with huge other dims is refused, not given overflowed strides") {
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(
                       R"({"x":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", "")),
                   "tensor 'x': shape (0, 4294967296, 4294967296) is too large");
  CHECK_REEL_ERROR(from_safetensors_bytes(make_file(
                       R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", "")),
                   "tensor 'x': shape (2305843009213693952) is too large");
  const TensorDict ok = from_safetensors_bytes(
      make_file(R"({"x":{"dtype":"F32","shape":[1099511627776,0,1099511627776],"data_offsets":[0,0]}})", ""));
  CHECK(ok.at("x").shape() == Shape{1LL << 40, 0, 1LL << 40});
}
