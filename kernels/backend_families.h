// The op families that have backend kernels, one line each: kernels/backends.h includes this list
// inside namespace reel::kernels::cpu and again inside reel::kernels::cuda, so both backends
// declare the same functions. A new family adds its kernels/<family>_backend.h line here.
// No include guard: included only by kernels/backends.h, inside a namespace.
#include "kernels/elementwise_backend.h"
#include "kernels/matmul_backend.h"
#include "kernels/reduce_backend.h"
#include "kernels/layernorm_backend.h"
#include "kernels/softmax_backend.h"
#include "kernels/cross_entropy_backend.h"
#include "kernels/embedding_backend.h"
#include "kernels/max_backend.h"
#include "kernels/attention_backend.h"
#include "kernels/optimizer_backend.h"
#include "kernels/dropout_backend.h"
