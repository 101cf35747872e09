// Where a tensor lives: the host ("cpu"), a CUDA device ("cuda:N"), or nowhere ("meta"). In the
// emulated build "cuda:0" is served by kernels/simt on the host; in the nvcc build by a real GPU.
// The meta device is a CUDA device that computes nothing (kernels/meta.h): its tensors have shapes,
// dtypes, strides and storages of the sizes cuda:0 would allocate, at addresses that are never
// backed, and every op runs the CUDA backend's code dry (the same allocations, workspaces and
// profiler records, no kernel executed), so a step's memory and predicted time are known without
// a GPU. Values read back to the host from meta are zeros.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace reel {

struct Device {
  enum class Type : uint8_t { cpu, cuda, meta };
  Type type = Type::cpu;
  int index = 0;

  Device() = default;
  Device(Type t, int i = 0) : type(t), index(i) {}
  // "cpu", "cuda", "cuda:1", "meta"; anything else raises reel::Error.
  explicit Device(const std::string& spec);
  Device(const char* spec) : Device(std::string(spec)) {}

  static Device cpu() { return Device(Type::cpu, 0); }
  static Device cuda(int index = 0) { return Device(Type::cuda, index); }
  static Device meta() { return Device(Type::meta, 0); }
  bool is_cpu() const { return type == Type::cpu; }
  bool is_cuda() const { return type == Type::cuda; }
  bool is_meta() const { return type == Type::meta; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// The device new modules are made on: nn::Module's parameters and buffers are created there (and
// their initialisers run there) while a DeviceScope lives on this thread; cpu outside any. So a
// model too big for the host is made straight on a GPU, or on meta for a dry run, as under
// `with torch.device("meta"):`:
//   { reel::DeviceScope on(Device::meta()); nn::GPT gpt(config); }  // 1.5B parameters, no host bytes
// Unlike PyTorch's, the scope does not change the tensor factories' default (cpu): a tensor's device
// is named where it is made, so library code that makes host scratch stays on the host.
Device default_device();
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device previous_;
};

// True when the build has a CUDA backend and a device answers: a real GPU in the nvcc build,
// always in the emulated build, false in the nvcc build on a machine without a GPU.
bool cuda_available();
int cuda_device_count();

}  // namespace reel
