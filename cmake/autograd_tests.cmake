# The tape (autograd/): recording, backward, accumulation, checkpoint segments, every op's gradient.
# Included by tests/CMakeLists.txt. Every suite runs on every device the build offers.
reel_test(test_autograd test_autograd.cpp)
reel_test(test_autograd_ops test_autograd_ops.cpp)
reel_test(test_accumulation test_accumulation.cpp)
reel_test(test_checkpoint test_checkpoint.cpp)
