// safetensors reader and writer (see safetensors.h), parsing the header with nlohmann-json.
#include "nn/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/checked_math.h"

namespace reel::nn {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's limit
constexpr int kMaxDepth = 64;  // a valid header nests 3 deep ({"name": {"shape": [..]}})

// Whether the JSON text [p, end) nests arrays/objects deeper than `limit`, counting brackets
// outside strings. nlohmann-json has no depth limit and recurses per level (building, dumping
// and destroying values), so a header 100,000 levels deep overflowed the stack: this runs on the
// raw bytes, before the parser sees them. Unbalanced or invalid text is left to the parser.
bool nests_deeper_than(const char* p, const char* end, int limit) {
  int depth = 0;
  bool in_string = false;
  for (; p != end; ++p) {
    const char c = *p;
    if (in_string) {
      if (c == '\\') {
        if (++p == end) break;  // skip the escaped character (\" does not end the string)
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// At most `n` characters of `s`, for quoting a value from a file in a message without letting a
// huge one through.
std::string clip(const std::string& s, size_t n = 64) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::f32;
  else if (s == "F64") out = DType::f64;
  else if (s == "I32") out = DType::i32;
  else if (s == "I64") out = DType::i64;
  else if (s == "BF16") out = DType::bf16;
  else if (s == "F16") out = DType::f16;
  else return false;
  return true;
}

}  // namespace

std::string to_safetensors_bytes(const TensorDict& tensors, const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    REEL_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    REEL_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    // detach() first: contiguous() of a non-contiguous view that requires grad would record a node
    // on the tape; saving only reads values and never touches autograd.
    host.push_back(t.detach().to(Device::cpu()).contiguous());
    const uint64_t bytes = host.back().nbytes();
    header[name] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as Python's writer does
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  out += json;
  out.reserve(out.size() + offset);
  for (const Tensor& t : host) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return out;
}

TensorDict from_safetensors_bytes(const std::string& bytes, Device device, Metadata* metadata,
                                  const std::string& source) {
  const char* op = "load_safetensors";
  REEL_CHECK(bytes.size() >= 8, op, ": ", source, " is ", bytes.size(),
             " bytes, too short for the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  REEL_CHECK(header_len <= bytes.size() - 8, op, ": ", source, ": header length ", header_len,
             " goes beyond the end of the file (", bytes.size(), " bytes)");
  REEL_CHECK(header_len <= kMaxHeader, op, ": ", source, ": header length ", header_len, " exceeds the limit of ",
             kMaxHeader, " bytes");
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = bytes.size() - data_begin;

  REEL_CHECK(!nests_deeper_than(bytes.data() + 8, bytes.data() + data_begin, kMaxDepth), op, ": ", source,
             ": the header nests deeper than ", kMaxDepth, " levels of arrays and objects");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + static_cast<std::ptrdiff_t>(data_begin));
  } catch (const nlohmann::json::exception& e) {
    // The parser's message quotes the token it stopped in, which can be most of the header.
    REEL_FAIL(op, ": ", source, ": the header is not valid JSON: ", clip(e.what(), 200));
  }
  REEL_CHECK(header.is_object(), op, ": ", source, ": the header is not a JSON object");

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      REEL_CHECK(v.is_object(), op, ": ", source, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        REEL_CHECK(m.value().is_string(), op, ": ", source, ": __metadata__ value of '", m.key(),
                   "' is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    REEL_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), op, ": ",
               source, ": entry '", name, "' needs dtype, shape and data_offsets");
    // Messages name the key and the form expected; they never dump() the value found, which may be
    // huge (and dumping recurses once per level).
    Entry e{name, DType::f32, {}, 0, 0};
    const std::string where = std::string(op) + ": " + source + ": tensor '" + clip(name, 200) + "'";
    REEL_CHECK(v["dtype"].is_string(), where, ": dtype is not a string (expected one of F32, F64, BF16, F16, I32, I64)");
    const std::string& dtype = v["dtype"].get_ref<const std::string&>();
    REEL_CHECK(parse_dtype(dtype, e.dtype), where, " has dtype \"", clip(dtype),
               "\", which reel does not know (F32, F64, BF16, F16, I32, I64)");
    REEL_CHECK(v["shape"].is_array(), where, ": shape is not an array (expected an array of non-negative integers)");
    for (size_t i = 0; i < v["shape"].size(); ++i) {
      const nlohmann::json& d = v["shape"][i];
      REEL_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
                 ": shape has an invalid dimension at index ", i, " (expected an array of non-negative integers)");
      const uint64_t n = d.get<uint64_t>();
      REEL_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": dimension ", n,
                 " at index ", i, " of shape is too large");
      e.shape.push_back(static_cast<int64_t>(n));
    }
    // What empty() will compute (strides, element count, bytes), checked here so that the error
    // names the tensor: a zero-element shape with huge other dims still needs strides that fit.
    contiguous_strides(e.shape, where);
    const int64_t nbytes = checked_mul(shape_numel(e.shape, where), static_cast<int64_t>(dtype_size(e.dtype)),
                                       where, e.shape);
    const auto& offsets = v["data_offsets"];
    REEL_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               where, ": data_offsets is not a pair of non-negative integers");
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    REEL_CHECK(e.begin <= e.end && e.end <= data_size, op, ": ", source, ": tensor '", name, "': data_offsets [",
               e.begin, ", ", e.end, "] are out of range for ", data_size, " bytes of data");
    REEL_CHECK(static_cast<uint64_t>(nbytes) == e.end - e.begin, where, ": shape ", e.shape, " of ",
               dtype_name(e.dtype), " needs ", nbytes, " bytes but data_offsets span ", e.end - e.begin);
    entries.push_back(std::move(e));
  }

  // The ranges must tile the data exactly: no overlap, no hole, nothing after the last one.
  std::vector<const Entry*> sorted;
  for (const Entry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t expected = 0;
  for (const Entry* e : sorted) {
    REEL_CHECK(e->begin == expected, op, ": ", source, ": tensor '", e->name, "' starts at byte ", e->begin,
               " of the data, expected ", expected, " (ranges overlap or leave a hole)");
    expected = e->end;
  }
  REEL_CHECK(expected == data_size, op, ": ", source, ": the tensors cover ", expected, " bytes but the data holds ",
             data_size);

  TensorDict out;
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype, Device::cpu());
    if (t.nbytes() > 0) std::memcpy(t.data_ptr(), bytes.data() + data_begin + e.begin, t.nbytes());
    out[e.name] = t.to(device);
  }
  return out;
}

void save_safetensors(const std::string& path, const TensorDict& tensors, const Metadata& metadata) {
  const std::string bytes = to_safetensors_bytes(tensors, metadata);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  REEL_CHECK(f.good(), "save_safetensors: cannot open '", path, "' for writing");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REEL_CHECK(f.good(), "save_safetensors: writing '", path, "' failed");
}

TensorDict load_safetensors(const std::string& path, Device device, Metadata* metadata) {
  // An ifstream opens a directory "successfully" and reads 0 bytes, which would be reported as a
  // file too short for its header.
  std::error_code ec;
  REEL_CHECK(!std::filesystem::is_directory(path, ec), "load_safetensors: '", path,
             "' is a directory, not a safetensors file");
  std::ifstream f(path, std::ios::binary);
  REEL_CHECK(f.good(), "load_safetensors: cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return from_safetensors_bytes(ss.str(), device, metadata, "'" + path + "'");
}

}  // namespace reel::nn
