// The GPUs a step can be predicted on (report/predict.h): their datasheet peaks, dense (the 2:4
// sparsity figures halved), each row with where its figures were checked. A new device is one row.
#include <sstream>

#include "core/error.h"
#include "report/predict.h"

namespace reel::profile {

namespace {
constexpr double T = 1e12, G = 1e9;
constexpr double kLaunch = 3e-6;  // a kernel launch on a busy stream, about 3 us on every row
}  // namespace

const std::vector<DeviceSpec>& device_specs() {
  // name, description, bandwidth, FP32, FP64 (vector), TF32, BF16, FP16 (tensor, dense), SMs,
  // host link each way, launch, GPU interconnect each way.
  // Interconnect: NVLink's bidirectional figure per GPU halved (H100 and H200 SXM, fourth-generation
  // NVLink, 900 GB/s per GPU counting both directions, on NVIDIA's H200 product page; A100 SXM, third
  // generation, 600 GB/s: 300 GB/s each way); the RTX 4090 has no NVLink, so its peers talk over
  // PCIe 4.0 x16. NCCL's measured bus bandwidth (nccl-tests) is below these link rates: a
  // collective's prediction is its floor, as every other row's is.
  static const std::vector<DeviceSpec> specs = {
      // H200 SXM: 4.8 TB/s, 132 SMs, PCIe Gen5 128 GB/s both ways (saulelectric.com/nvidia-h200.html);
      // the GH100 die of the H100, so its rates: FP32 66.9, FP64 33.5, TF32 494.7, FP16/BF16 989.4 TF
      // dense (glennklockwood.com/garden/processors/h100, "H200 GPUs are the same as H100 GPUs";
      // itkb.uw.cz/2026/06/nvidia-h200-vs-b300-precisions-cores.html: FP16/BF16 ~989 dense, FP64 34).
      {"h200", "NVIDIA H200 SXM (141 GB HBM3e)", 4.8e12, 66.9 * T, 33.5 * T, 494.7 * T, 989.4 * T, 989.4 * T, 132,
       64 * G, kLaunch, 450 * G},
      // H100 SXM: 3,350 GB/s, 132 SMs, FP32 67, FP64 34, TF32 989 / BF16 1,979 / FP16 1,979 with
      // sparsity, PCIe Gen5 128 GB/s (archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html, the
      // datasheet's table; dense rates from glennklockwood.com/garden/processors/h100).
      {"h100", "NVIDIA H100 SXM (80 GB HBM3)", 3.35e12, 66.9 * T, 33.5 * T, 494.7 * T, 989.4 * T, 989.4 * T, 132,
       64 * G, kLaunch, 450 * G},
      // A100 SXM 80 GB: 2,039 GB/s (thundercompute.com/blog/nvidia-a100-specs-full-guide); 108 SMs,
      // FP32 19.5, FP64 9.7, TF32 156, FP16/BF16 312 TF dense, PCIe Gen4 32+32 GB/s
      // (glennklockwood.com/garden/processors/A100, from NVIDIA's A100 datasheet).
      {"a100", "NVIDIA A100 SXM (80 GB HBM2e)", 2.039e12, 19.5 * T, 9.7 * T, 156 * T, 312 * T, 312 * T, 108, 32 * G,
       kLaunch, 300 * G},
      // GeForce RTX 4090: 1,008 GB/s, 128 SMs, FP32 82.6 TF (holynerdvana.blogspot.com/2022/10/
      // nvidia-geforce-rtx-4090-specifications.html, Tom's Hardware's table); FP64 1.29, tensor TF32
      // 82.6, FP16/BF16 165.2 TF dense with FP32 accumulate (waredb.com/processor/
      // nvidia-geforce-rtx-4090); PCIe 4.0 x16: about 32 GB/s each way.
      {"rtx4090", "NVIDIA GeForce RTX 4090 (24 GB GDDR6X)", 1.008e12, 82.6 * T, 1.29 * T, 82.6 * T, 165.2 * T,
       165.2 * T, 128, 32 * G, kLaunch, 32 * G},
  };
  return specs;
}

const DeviceSpec& device_spec(const std::string& name) {
  std::ostringstream known;
  for (const DeviceSpec& s : device_specs()) {
    if (s.name == name) return s;
    known << (known.tellp() > 0 ? ", " : "") << s.name;
  }
  REEL_FAIL("predict: unknown device '", name, "' (known: ", known.str(), ")");
}

}  // namespace reel::profile
