# Third-party dependencies: found on the system (Debian's -dev packages, see tools/setup.sh) or,
# on a machine that lacks them (the GPU check machine has nvcc, CMake and ninja only, and no
# downloads), in the git-ignored folder .deps/ that `tools/gpu_check.sh --prepare` fills from a
# machine that has them:
#   .deps/include/eigen3/   .deps/include/doctest/   .deps/include/nlohmann/   .deps/include/CLI/
#   .deps/include/zlib.h, zconf.h                    .deps/lib/libz.a
set(REEL_DEPS_DIR ${PROJECT_SOURCE_DIR}/.deps)

# reel_dep_from_deps(<target> <package> <file under .deps>): an imported header-only target over
# .deps/include, or a configure error saying how to get the package.
function(reel_dep_from_deps target package file)
  if(NOT EXISTS ${REEL_DEPS_DIR}/${file})
    message(FATAL_ERROR "reel: ${package} not found. Install it (tools/setup.sh), or run "
                        "`tools/gpu_check.sh --prepare` on a machine that has it and bring .deps/ along.")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  message(STATUS "reel: ${package} from .deps/ (${file})")
endfunction()

find_package(Eigen3 3.3 QUIET NO_MODULE)
if(NOT TARGET Eigen3::Eigen)
  reel_dep_from_deps(Eigen3::Eigen Eigen3 include/eigen3/Eigen/Core)
  set_target_properties(Eigen3::Eigen PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${REEL_DEPS_DIR}/include/eigen3)
endif()

find_package(nlohmann_json 3 QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  reel_dep_from_deps(nlohmann_json::nlohmann_json nlohmann_json include/nlohmann/json.hpp)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${REEL_DEPS_DIR}/include)
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

if(REEL_BUILD_EXAMPLES)
  find_package(CLI11 QUIET)
  if(NOT TARGET CLI11::CLI11)
    reel_dep_from_deps(CLI11::CLI11 CLI11 include/CLI/CLI.hpp)
    set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${REEL_DEPS_DIR}/include)
  endif()
endif()

if(REEL_BUILD_TESTS)
  find_package(doctest QUIET)
  if(NOT TARGET doctest::doctest)
    reel_dep_from_deps(doctest::doctest doctest include/doctest/doctest.h)
    set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${REEL_DEPS_DIR}/include)
  endif()
endif()
