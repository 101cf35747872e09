# The layering, enforced by the linker: for each layer, a program that links EVERY object of that
# layer's library (whole archive) and, normally, only the layers below it. A call from the layer up
# into a higher one (core calling autograd, kernels recording on the tape...) is then an undefined
# symbol and this build fails, naming it. The programs are built with `all` and never run.
set(layer_check_main ${CMAKE_CURRENT_BINARY_DIR}/layer_check_main.cpp)
file(WRITE ${layer_check_main} "int main() { return 0; }\n")
set(reel_layers reel_core reel_kernels reel_autograd reel_nn reel_optim)
if(REEL_DIST)
  list(APPEND reel_layers reel_dist)
endif()
foreach(layer ${reel_layers})
  add_executable(layer_check_${layer} ${layer_check_main})
  target_link_libraries(layer_check_${layer} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${layer}>")
endforeach()
