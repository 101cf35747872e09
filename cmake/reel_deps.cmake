# Third-party dependencies: found on the system (Debian's -dev packages, see tools/setup.sh) or,
# on a machine that lacks them (the GPU check machine has nvcc, CMake and ninja only, and no
# downloads), in the git-ignored folder .deps/ that `tools/gpu_check.sh --prepare` fills from a
# machine that has them:
#   .deps/include/eigen3/   .deps/include/doctest/   .deps/include/nlohmann/   .deps/include/CLI/
#   .deps/include/zlib.h, zconf.h                    .deps/lib/libz.a
set(REEL_DEPS_DIR ${PROJECT_SOURCE_DIR}/.deps)

# reel_header_only_dep(<target> <package> <file under .deps> <include dir under .deps> [find args...]):
# find_package(<package> [find args] QUIET); when that gives no <target>, an imported header-only
# target over .deps/<include dir>, or a configure error saying how to get the package.
function(reel_header_only_dep target package file include_dir)
  find_package(${package} ${ARGN} QUIET)
  if(TARGET ${target})
    return()
  endif()
  if(NOT EXISTS ${REEL_DEPS_DIR}/${file})
    message(FATAL_ERROR "reel: ${package} not found. Install it (tools/setup.sh), or run "
                        "`tools/gpu_check.sh --prepare` on a machine that has it and bring .deps/ along.")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${REEL_DEPS_DIR}/${include_dir})
  message(STATUS "reel: ${package} from .deps/ (${file})")
endfunction()

reel_header_only_dep(Eigen3::Eigen Eigen3 include/eigen3/Eigen/Core include/eigen3 3.4 NO_MODULE)
reel_header_only_dep(nlohmann_json::nlohmann_json nlohmann_json include/nlohmann/json.hpp include 3)
if(REEL_BUILD_EXAMPLES)
  reel_header_only_dep(CLI11::CLI11 CLI11 include/CLI/CLI.hpp include)
endif()
if(REEL_BUILD_TESTS)
  reel_header_only_dep(doctest::doctest doctest include/doctest/doctest.h include)
endif()

find_package(ZLIB QUIET)
if(NOT TARGET ZLIB::ZLIB)
  if(NOT EXISTS ${REEL_DEPS_DIR}/include/zlib.h OR NOT EXISTS ${REEL_DEPS_DIR}/lib/libz.a)
    message(FATAL_ERROR "reel: zlib not found. Install zlib1g-dev (tools/setup.sh), or run "
                        "`tools/gpu_check.sh --prepare` on a machine that has it and bring .deps/ along.")
  endif()
  add_library(ZLIB::ZLIB STATIC IMPORTED GLOBAL)
  set_target_properties(ZLIB::ZLIB PROPERTIES IMPORTED_LOCATION ${REEL_DEPS_DIR}/lib/libz.a
                                              INTERFACE_INCLUDE_DIRECTORIES ${REEL_DEPS_DIR}/include)
  message(STATUS "reel: zlib from .deps/ (lib/libz.a)")
endif()
