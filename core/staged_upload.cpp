// StagedUpload (core/staged_upload.h): host bytes to a device tensor through pinned staging buffers.
#include "core/staged_upload.h"

#include <cstring>

#include "core/error.h"

namespace reel {

void StagedUpload::write(const Tensor& dst, const void* src, size_t bytes) {
  REEL_CHECK(dst.defined() && dst.is_contiguous() && dst.nbytes() == bytes, "StagedUpload: ", bytes,
             " bytes into a tensor of ", dst.defined() ? dst.nbytes() : 0, " bytes (contiguous, the same size expected)");
  while (!staging_.empty() && staging_.front().second.query()) staging_.pop_front();  // their copies are done
  const Device device = dst.device();
  PinnedBuffer host(bytes, device);
  if (!device.is_meta()) std::memcpy(host.data(), src, bytes);  // meta's pinned pool holds no bytes: it records the copy
  const Stream stream = Stream::compute(device);
  copy_async(host, dst, stream);
  staging_.emplace_back(std::move(host), stream.record());
}

}  // namespace reel
