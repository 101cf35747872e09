# nn: modules and layers, the GPT, and training through the accumulation window and checkpointing.
reel_test(test_module test_module.cpp)
reel_test(test_gpt test_gpt.cpp)
reel_test(test_training test_training.cpp)
