# examples/fashion_mnist_mlp run end to end on a slice of Fashion-MNIST (tiny settings, seconds
# each), and the promise of the accumulation window and of checkpointing checked on saved weights:
# the same 20 SGD steps taken plain, as 4 micro-batches per step and with checkpoint sqrt.
#   * accumulation sums the gradient in a different order, so it may differ by float rounding;
#   * checkpointing replays the very same kernels on the very same inputs: bit-identical (atol 0).
# The runs write their .safetensors into the build tree; the compares need them (a CTest fixture).
# Included by tests/CMakeLists.txt.
if(REEL_BUILD_EXAMPLES)
  set(mlp $<TARGET_FILE:fashion_mnist_mlp>)
  set(mlp_diff $<TARGET_FILE:safetensors_diff>)
  set(mlp_out ${CMAKE_CURRENT_BINARY_DIR}/example_mlp)
  set(mlp_tiny --train-limit 2000 --test-limit 500 --quiet)

  # Chance is 0.10; 30 Adam steps of 128 reach about 0.75.
  add_test(NAME example_mlp_cpu COMMAND ${mlp} ${mlp_tiny} --max-steps 30 --min-accuracy 0.6)
  set_tests_properties(example_mlp_cpu PROPERTIES TIMEOUT 120)
  if(REEL_HAS_CUDA_BACKEND)
    add_test(NAME example_mlp_cuda
             COMMAND ${mlp} ${mlp_tiny} --device cuda --max-steps 30 --accum-steps 2 --checkpoint sqrt --min-accuracy 0.6)
    # The nvcc build on a machine without a GPU: skipped, as the CUDA test binaries are (exit 77).
    set_tests_properties(example_mlp_cuda PROPERTIES TIMEOUT 300 SKIP_REGULAR_EXPRESSION "has no CUDA device")
  endif()

  # 20 steps of 128 over 1990 images: the epoch's 16th window is a short one of 70, cut 18+18+17+17,
  # so averaging per micro-batch instead of over the window would show.
  set(mlp_equiv --train-limit 1990 --test-limit 100 --quiet --optimizer sgd --lr 0.05 --seed 7 --max-steps 20)
  file(MAKE_DIRECTORY ${mlp_out})
  add_test(NAME example_mlp_equiv_plain COMMAND ${mlp} ${mlp_equiv} --save ${mlp_out}/plain.safetensors)
  add_test(NAME example_mlp_equiv_accum4
           COMMAND ${mlp} ${mlp_equiv} --accum-steps 4 --save ${mlp_out}/accum4.safetensors)
  add_test(NAME example_mlp_equiv_ckpt_sqrt
           COMMAND ${mlp} ${mlp_equiv} --checkpoint sqrt --save ${mlp_out}/ckpt_sqrt.safetensors)
  set_tests_properties(example_mlp_equiv_plain example_mlp_equiv_accum4 example_mlp_equiv_ckpt_sqrt
                       PROPERTIES FIXTURES_SETUP example_mlp_equiv TIMEOUT 120)
  add_test(NAME example_mlp_accum_matches_plain
           COMMAND ${mlp_diff} ${mlp_out}/accum4.safetensors ${mlp_out}/plain.safetensors --atol 1e-5)
  add_test(NAME example_mlp_checkpoint_matches_plain
           COMMAND ${mlp_diff} ${mlp_out}/ckpt_sqrt.safetensors ${mlp_out}/plain.safetensors --atol 0)
  set_tests_properties(example_mlp_accum_matches_plain example_mlp_checkpoint_matches_plain
                       PROPERTIES FIXTURES_REQUIRED example_mlp_equiv TIMEOUT 60)
endif()
