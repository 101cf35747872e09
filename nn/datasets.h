// Real data from Debian packages, never a download:
//  * IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or plain, read with zlib;
//    Fashion-MNIST comes from the package dataset-fashion-mnist;
//  * a text corpus from the fortune cookie files of the package fortunes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel::nn {

// An IDX array of unsigned bytes: shape from the header, values row-major.
struct IdxArray {
  Shape shape;
  std::vector<uint8_t> data;
};

// Reads an IDX file of type ubyte (0x08); gzip-compressed files are decompressed on the fly.
// A missing file, a malformed header, a shape whose size overflows or exceeds 16 GiB, or a
// truncated payload raises reel::Error; memory is reserved only as payload bytes arrive, never for
// what the header merely declares.
IdxArray read_idx(const std::string& path);

struct ImageDataset {
  Tensor images;  // (N, H*W) f32 in [0, 1]
  Tensor labels;  // (N) i32 class ids
};

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// split is "train" (60000 images) or "test" (10000); images flattened to 784 values.
ImageDataset load_fashion_mnist(const std::string& split, const std::string& dir = kFashionMnistDir);

constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The text of every fortune file in `dir` (not the .dat indexes or .u8 duplicates), in file-name
// order, each fortune followed by a newline and the '%' separators removed.
std::string load_fortunes(const std::string& dir = kFortunesDir);

}  // namespace reel::nn
