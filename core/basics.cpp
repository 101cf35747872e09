// Small definitions for error.h, dtype.h, device.h and random.h.
#include <cstdlib>

#include "core/device_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/random.h"

namespace reel {

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = Type::cpu;
    index = 0;
    return;
  }
  if (spec == "cuda") {
    type = Type::cuda;
    index = 0;
    return;
  }
  if (spec == "meta") {
    type = Type::meta;
    index = 0;
    return;
  }
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    char* end = nullptr;
    const long i = std::strtol(spec.c_str() + 5, &end, 10);
    if (*end == '\0' && i >= 0 && i < 1024) {
      type = Type::cuda;
      index = static_cast<int>(i);
      return;
    }
  }
  REEL_FAIL("device: cannot parse '", spec, "': expected cpu, cuda, cuda:N or meta");
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  if (is_meta()) return "meta";
  return "cuda:" + std::to_string(index);
}

namespace {
thread_local Device t_default_device = Device::cpu();  // DeviceScope's
}  // namespace

Device default_device() { return t_default_device; }
DeviceScope::DeviceScope(Device device) : previous_(t_default_device) { t_default_device = device; }
DeviceScope::~DeviceScope() { t_default_device = previous_; }

namespace {
DeviceBackends g_backends{};  // empty until kernels registers: constant-initialised, so safe at start-up

const DeviceBackends& registered_backends() {
  REEL_CHECK(g_backends.cpu != nullptr, "reel: no device backend is registered: link reel::reel (it registers "
             "them before main), or call reel::kernels::register_device_backends() first");
  return g_backends;
}
}  // namespace

void register_device_backends(const DeviceBackends& backends) { g_backends = backends; }

int cuda_device_count() {
  const DeviceBackends& b = registered_backends();
  return b.cuda_device_count ? b.cuda_device_count() : 0;
}
bool cuda_available() { return cuda_device_count() > 0; }

DeviceBackend& backend_for(Device device) {
  if (device.is_cpu()) return *registered_backends().cpu;
  if (device.is_meta()) {
    DeviceBackend* meta = registered_backends().meta ? registered_backends().meta() : nullptr;
    REEL_CHECK(meta != nullptr, "device meta is not available: this build has no emulated CUDA backend to run "
               "dry (the meta device runs the CUDA code of the default build, REEL_CUDA=OFF)");
    return *meta;
  }
  const int count = cuda_device_count();
  REEL_CHECK(device.index < count, "device ", device, " is not available: ",
             count == 0 ? "this build or machine has no CUDA device"
                        : "only " + std::to_string(count) + " CUDA device(s)");
  return *g_backends.cuda(device.index);
}

uint64_t Generator::next_offset() {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_++;
}

uint64_t Generator::offset() {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  offset_ = offset;
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace reel
