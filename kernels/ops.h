// The kernel entry points, every op family: compute on tensors, no autograd. Each function checks
// its inputs (shapes, dtypes, devices: reel::Error naming them), allocates the outputs on the
// inputs' device and dispatches to kernels/cpu or kernels/cuda. One header per family
// (kernels/<family>.h) holds its entry points, result structs and contracts; this umbrella
// includes them all. A new family adds its line here.
#pragma once
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/max.h"
#include "kernels/optimizer.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
