// reel.h: the one header a user includes. Each layer's public headers, bottom to top.
#pragma once
#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/dropout.h"
#include "kernels/ops.h"
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/gradcheck.h"
#include "autograd/tape.h"
