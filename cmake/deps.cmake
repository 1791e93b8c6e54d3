# deps.cmake: imported targets for the dependencies without a usable CMake package here.
# toml++ in header-only mode (Debian's package config links a shared library the GPU machines lack);
# NCCL and cuDNN from the CUDA toolkit; nvml.h from the nvidia-nvml-dev wheel (NVML is dlopen'ed);
# cudnn-frontend (header-only) from the nvidia-cudnn-frontend wheel.

find_path(TOMLPP_INCLUDE_DIR toml++/toml.h REQUIRED)
add_library(tb_dep_tomlpp INTERFACE)
target_include_directories(tb_dep_tomlpp SYSTEM INTERFACE ${TOMLPP_INCLUDE_DIR})
target_compile_definitions(tb_dep_tomlpp INTERFACE TOML_HEADER_ONLY=1 TOML_EXCEPTIONS=1)

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
add_library(tb_dep_nccl INTERFACE)
target_include_directories(tb_dep_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
target_link_libraries(tb_dep_nccl INTERFACE ${NCCL_LIBRARY})

find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
add_library(tb_dep_cudnn INTERFACE)
target_include_directories(tb_dep_cudnn SYSTEM INTERFACE ${CUDNN_INCLUDE_DIR})
target_link_libraries(tb_dep_cudnn INTERFACE ${CUDNN_LIBRARY})

# Only ops/cuda/attention.cpp includes it (heavy to compile); SYSTEM so its warnings are not ours.
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${TB_DEPS_DIR}/include)
if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
  message(FATAL_ERROR "cudnn_frontend.h not found: run scripts/setup.sh (installs the nvidia-cudnn-frontend wheel into .deps/python)")
endif()
add_library(tb_dep_cudnn_frontend INTERFACE)
target_include_directories(tb_dep_cudnn_frontend SYSTEM INTERFACE ${CUDNN_FRONTEND_INCLUDE_DIR})
target_link_libraries(tb_dep_cudnn_frontend INTERFACE tb_dep_cudnn)

find_path(NVML_INCLUDE_DIR nvml.h HINTS ${TB_DEPS_DIR}/nvidia/cu13/include ${CUDAToolkit_INCLUDE_DIRS})
if(NOT NVML_INCLUDE_DIR)
  message(FATAL_ERROR "nvml.h not found: run scripts/setup.sh (installs the nvidia-nvml-dev wheel into .deps/python)")
endif()
add_library(tb_dep_nvml INTERFACE)
target_include_directories(tb_dep_nvml SYSTEM INTERFACE ${NVML_INCLUDE_DIR})
target_link_libraries(tb_dep_nvml INTERFACE ${CMAKE_DL_LIBS})

add_library(tb_dep_fmt INTERFACE)
target_link_libraries(tb_dep_fmt INTERFACE fmt::fmt-header-only)

# CUTLASS (header-only) from the nvidia-cutlass wheel: only ops/cuda's grouped GEMM kernels include it (tb_ops links
# it privately); SYSTEM so its warnings are not ours.
find_path(CUTLASS_INCLUDE_DIR cutlass/cutlass.h HINTS ${CMAKE_SOURCE_DIR}/.deps/cutlass/cutlass_library/source/include
          NO_DEFAULT_PATH)
if(NOT CUTLASS_INCLUDE_DIR)
  message(FATAL_ERROR "cutlass/cutlass.h not found: run scripts/setup.sh (installs the nvidia-cutlass wheel into .deps/cutlass)")
endif()
add_library(tb_dep_cutlass INTERFACE)
target_include_directories(tb_dep_cutlass SYSTEM INTERFACE ${CUTLASS_INCLUDE_DIR})
