# The layering of cmake/layers.txt, enforced on what is linked (tools/check_layers.sh enforces it on
# what is included). After every layer's folder is added:
#   REEL_BUILT_LAYERS       the layer libraries this build has (distributed only with REEL_DISTRIBUTED), bottom to top
#   REEL_BUILT_LAYER_DIRS   their folders
# 1. At configure time: a layer that links a reel layer its line in cmake/layers.txt does not name
#    stops the configuration, naming both.
# 2. At build time: for each layer, a program that links EVERY object of that layer's library
#    (whole archive) and, through it, only the layers it links. A call from the layer up into a
#    higher one (core calling autograd, kernels recording on the tape...) is then an undefined
#    symbol and this build fails, naming it. The programs are built with `all` and never run.
set(REEL_BUILT_LAYERS "")
set(REEL_BUILT_LAYER_DIRS "")
foreach(folder ${REEL_LAYERS})
  if(TARGET reel_${folder})
    list(APPEND REEL_BUILT_LAYERS reel_${folder})
    list(APPEND REEL_BUILT_LAYER_DIRS ${folder})
  endif()
endforeach()

foreach(folder ${REEL_BUILT_LAYER_DIRS})
  get_target_property(links reel_${folder} LINK_LIBRARIES)
  if(NOT links)
    set(links "")
  endif()
  foreach(item ${links})
    # Entries may be generator expressions ($<BUILD_INTERFACE:...>): look at every reel_* name in them.
    string(REGEX MATCHALL "reel_[a-z_]+" names "${item}")
    foreach(name ${names})
      string(REGEX REPLACE "^reel_" "" linked ${name})
      if(linked IN_LIST REEL_LAYERS AND NOT linked IN_LIST REEL_LAYER_ALLOWED_${folder})
        list(JOIN REEL_LAYER_ALLOWED_${folder} " " allowed)
        message(FATAL_ERROR "reel: reel_${folder} links ${name}, which cmake/layers.txt does not allow "
                            "(${folder} may use: ${allowed})")
      endif()
    endforeach()
  endforeach()
endforeach()

set(layer_check_main ${CMAKE_CURRENT_BINARY_DIR}/layer_check_main.cpp)
file(WRITE ${layer_check_main} "int main() { return 0; }\n")
foreach(layer ${REEL_BUILT_LAYERS})
  add_executable(layer_check_${layer} ${layer_check_main})
  target_link_libraries(layer_check_${layer} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${layer}>")
endforeach()
