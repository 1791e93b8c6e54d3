# tb.cmake: tb_library() for the src/<layer>/ targets and tb_add_test() for tests.
# Warnings are errors on our own targets only (TB_WERROR).

function(tb_warnings target)
  set(cxx_warn -Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter)
  if(TB_WERROR)
    list(APPEND cxx_warn -Werror)
  endif()
  string(REPLACE ";" "," host_warn "${cxx_warn}")
  set(cuda_warn -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter --Werror=all-warnings)
  if(NOT TB_WERROR)
    set(cuda_warn -Xcompiler=-Wall)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_warn}>
    $<$<COMPILE_LANGUAGE:CUDA>:${cuda_warn} --expt-relaxed-constexpr>)
endfunction()

# tb_library(<name> [DIR subfolder] [ONLY regex] [EXCLUDE regex] [DEPS targets...]): builds the *.cpp|*.cu of this
# folder (or of DIR below it), subfolders included, those matching ONLY if given, minus those matching EXCLUDE, as
# tb_<name>. DIR, ONLY and EXCLUDE split one layer
# into a host-only library and a CUDA one (ops: ops_cpu + ops; model: model + model_cuda), so the host-only layers
# (recipe, report, launch, project) link no CUDA library.
function(tb_library layer)
  cmake_parse_arguments(ARG "" "DIR;ONLY;EXCLUDE" "DEPS" ${ARGN})
  set(dir ${CMAKE_CURRENT_SOURCE_DIR})
  if(ARG_DIR)
    set(dir ${dir}/${ARG_DIR})
  endif()
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/*.cu)
  list(FILTER srcs EXCLUDE REGEX "_test\\.(cpp|cu)$")
  if(ARG_ONLY)
    list(FILTER srcs INCLUDE REGEX "${ARG_ONLY}")
  endif()
  if(ARG_EXCLUDE)
    list(FILTER srcs EXCLUDE REGEX "${ARG_EXCLUDE}")
  endif()
  add_library(tb_${layer} STATIC ${srcs})
  target_include_directories(tb_${layer} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(tb_${layer} PUBLIC ${ARG_DEPS})
  set_target_properties(tb_${layer} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  tb_warnings(tb_${layer})
endfunction()

# tb_add_test(<source> LABELS cpu|gpu|multigpu DEPS targets...): one gtest binary per test file.
function(tb_add_test src)
  cmake_parse_arguments(ARG "" "" "LABELS;DEPS" ${ARGN})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main)
  tb_warnings(${name})
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_MODE PRE_TEST
                       WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()

# tb_add_mpi_test(<source> RANKS n... DEPS targets...): one gtest binary run under mpirun once per rank count
# (oversubscribed: CI has 2 cores; root allowed: CI containers run as root). A hang ends at the timeout.
function(tb_add_mpi_test src)
  cmake_parse_arguments(ARG "" "" "RANKS;DEPS" ${ARGN})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main)
  tb_warnings(${name})
  foreach(np ${ARG_RANKS})
    add_test(NAME ${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
                     $<TARGET_FILE:${name}>
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(${name}.np${np} PROPERTIES LABELS cpu TIMEOUT 300 PROCESSORS ${np}
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()
