// The kernel entry points, every op family: compute on tensors, no autograd. Each function checks
// its inputs (shapes, dtypes, devices: reel::Error naming them), allocates the outputs on the
// inputs' device and dispatches to kernels/cpu or kernels/cuda. One header per family
// (kernels/<family>.h) holds its entry points, result structs and contracts; this umbrella
// includes them all. A new family adds its line here.
//
// No include guard, on purpose: kernels/backends.h includes this list again, with
// REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu and reel::kernels::cuda, where
// each family header then declares its backend kernels (its part outside its own include guard).
// Anywhere else a second inclusion adds nothing: every family header is guarded.
#include "kernels/attention.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/pool.h"
#include "kernels/max.h"
#include "kernels/optimizer.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "kernels/unscale.h"
