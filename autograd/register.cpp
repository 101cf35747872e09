// autograd's link with core: core records the views of a tensor that requires grad through the
// differentiable views registered here (core/autograd_meta.h), so core never calls up into autograd.
#include "autograd/functions.h"
#include "autograd/tape.h"

namespace reel::autograd {

void register_with_core() {
  RecordingViews views;
  views.view = &reel::view;
  views.reshape = &reel::reshape;
  views.transpose = &reel::transpose;
  views.permute = &reel::permute;
  views.slice = &reel::slice;
  views.select = &reel::select;
  views.squeeze = &reel::squeeze;
  views.unsqueeze = &reel::unsqueeze;
  views.expand = &reel::expand;
  views.contiguous = &reel::contiguous;
  register_recording_views(views);
  // The tape releases what no live tensor depends on as soon as the last such tensor goes.
  register_output_released(&Tape::output_released);
}

}  // namespace reel::autograd
