# examples/char_gpt run end to end with a tiny model on the fortunes corpus (seconds each):
#   * 150 tiny steps must bring the validation loss below the unigram entropy of the training text
#     (--min-gain: by that many nats), on cpu and on cuda;
#   * a saved model, reloaded with --max-steps 0, must report the validation loss it was saved
#     with (the program checks it against the value in the file's metadata) and sample text;
#   * a file whose vocabulary differs from the corpus is refused with a clear error;
#   * checkpointing every block under 2 micro-batches per step runs to the end, still learning.
# Included by tests/CMakeLists.txt.
if(REEL_BUILD_EXAMPLES)
  set(gpt $<TARGET_FILE:char_gpt>)
  set(gpt_out ${CMAKE_CURRENT_BINARY_DIR}/example_gpt)
  file(MAKE_DIRECTORY ${gpt_out})
  # A tiny model (one block of width 16) that escapes the unigram plateau quickly: with tied
  # embeddings a small width learns the bigram statistics in fewer steps than a wide one.
  set(gpt_tiny --n-head 2 --n-embd 16 --block-size 32 --batch 16 --schedule constant --lr 1e-2 --max-steps 150
               --eval-every 50 --eval-windows 32 --quiet)

  # The unigram entropy of the training text is 3.30 nats; 150 steps reach 2.81 to 2.89 (seeds 0-3),
  # three blocks (below) learn more slowly: about 3.10.
  add_test(NAME example_gpt_cpu COMMAND ${gpt} ${gpt_tiny} --n-layer 1 --sample-chars 80 --min-gain 0.2)
  set_tests_properties(example_gpt_cpu PROPERTIES TIMEOUT 120)
  if(REEL_HAS_CUDA_BACKEND)
    add_test(NAME example_gpt_cuda
             COMMAND ${gpt} ${gpt_tiny} --n-layer 1 --sample-chars 80 --device cuda --min-gain 0.2)
    # The nvcc build on a machine without a GPU: skipped, as the CUDA test binaries are (exit 77).
    set_tests_properties(example_gpt_cuda PROPERTIES TIMEOUT 300 SKIP_REGULAR_EXPRESSION "has no CUDA device")
  endif()

  # Save, then reload without the model options (the file carries them) and only evaluate and sample.
  add_test(NAME example_gpt_save
           COMMAND ${gpt} ${gpt_tiny} --n-layer 1 --sample-chars 0 --save ${gpt_out}/tiny.safetensors)
  set_tests_properties(example_gpt_save PROPERTIES FIXTURES_SETUP example_gpt_saved TIMEOUT 120)
  add_test(NAME example_gpt_load_sample
           COMMAND ${gpt} --max-steps 0 --load ${gpt_out}/tiny.safetensors --eval-windows 32 --sample-chars 200 --quiet)
  set_tests_properties(example_gpt_load_sample PROPERTIES FIXTURES_REQUIRED example_gpt_saved TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "val loss matches the saved model's: [0-9.]+\n.*---- sample")

  # A corpus without the letter 'z' (nor most others): its vocabulary cannot match the saved one.
  file(WRITE ${gpt_out}/other_corpus/tiny "Abc abc.\n%\nCab, bac.\n%\n")
  add_test(NAME example_gpt_load_wrong_vocab
           COMMAND ${gpt} --max-steps 0 --load ${gpt_out}/tiny.safetensors --corpus-dir ${gpt_out}/other_corpus --quiet)
  set_tests_properties(example_gpt_load_wrong_vocab PROPERTIES FIXTURES_REQUIRED example_gpt_saved TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "the vocabulary of .* does not match the corpus")

  # Every block its own checkpoint segment (the last one excepted: see CheckpointPolicy::plan), two
  # micro-batches per step: segments replayed under accumulation, and still learning.
  add_test(NAME example_gpt_checkpoint_accum
           COMMAND ${gpt} ${gpt_tiny} --n-layer 3 --checkpoint every:1 --accum-steps 2 --sample-chars 0 --min-gain 0.1)
  set_tests_properties(example_gpt_checkpoint_accum PROPERTIES TIMEOUT 120)
endif()
