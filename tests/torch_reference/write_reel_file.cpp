// write_reel_file: the reel half of tests/torch_reference/reads_reel.py (PyTorch reading reel's
// files). Writes OUT, a safetensors file made by reel's writer:
//   src              F32  (rows, 8)  torch's f32 sources of every class of value (from IN, the
//                                    committed tests/data/torch/dtypes.safetensors)
//   reel_bf16/_f16   BF16/F16        reel's conversions of src (Tensor::to)
//   reel_bf16_f32/.. F32             reel's widening of those back to f32
//   randn_f32        F32  (4, 5, 3)  reel's normal samples (x 100), and their conversions:
//   randn_bf16/_f16  BF16/F16
//   usage: write_reel_file IN OUT
#include <cstdio>
#include <exception>

#include "nn/safetensors.h"
#include "reel.h"

using namespace reel;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_reel_file IN(dtypes.safetensors) OUT\n");
    return 2;
  }
  try {
    const Tensor src = nn::load_safetensors(argv[1]).at("src");
    manual_seed(27);
    const Tensor randn_f32 = randn({4, 5, 3}) * 100.0;
    nn::TensorDict out;
    out["src"] = src;
    out["randn_f32"] = randn_f32;
    for (DType dt : {DType::bf16, DType::f16}) {
      const std::string tag = dt == DType::bf16 ? "bf16" : "f16";
      out["reel_" + tag] = src.to(dt);
      out["reel_" + tag + "_f32"] = out["reel_" + tag].to(DType::f32);
      out["randn_" + tag] = randn_f32.to(dt);
    }
    nn::save_safetensors(argv[2], out, {{"format", "pt"}, {"made_by", "tests/torch_reference/write_reel_file.cpp"}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_reel_file: %s\n", e.what());
    return 1;
  }
  return 0;
}
