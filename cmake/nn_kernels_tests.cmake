# The CPU kernels of the neural-network op families (kernels/ops.h): values against f64
# reference loops, every backward against finite differences, determinism, bad inputs.
reel_test(test_nn_kernels_norm test_nn_kernels_norm.cpp)
reel_test(test_nn_kernels_softmax test_nn_kernels_softmax.cpp)
reel_test(test_nn_kernels_cross_entropy test_nn_kernels_cross_entropy.cpp)
reel_test(test_nn_kernels_embedding test_nn_kernels_embedding.cpp)
reel_test(test_nn_kernels_attention test_nn_kernels_attention.cpp)
reel_test(test_nn_kernels_optimizer test_nn_kernels_optimizer.cpp)
