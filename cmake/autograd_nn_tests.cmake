# The tape ops of MLPs and transformers (autograd/nn_functions.h and the shape ops): views as tape
# ops, cross-entropy edge cases, fused against composed attention, bad inputs, a checkpointed GPT.
# (Their gradchecks and device runs are rows of the op table in test_autograd_ops.)
reel_test(test_autograd_nn test_autograd_nn.cpp)
