// reel.cpp: compiled into every program that links reel::reel (an INTERFACE source of the umbrella
// target). Before main it registers the upper layers with core: the device backends of kernels and
// the differentiable views of autograd. Core never calls up into them (the layers are static
// libraries linked in order, so such a call would not link); it calls what is registered here.
#include "autograd/tape.h"
#include "kernels/device_backends.h"

namespace {

[[maybe_unused]] const bool reel_layers_registered = [] {
  reel::kernels::register_device_backends();
  reel::autograd::register_with_core();
  return true;
}();

}  // namespace
