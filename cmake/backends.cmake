# backends.cmake — decide which optional backends this build has.
#
# Each backend has a real source set and a stub set; exactly one of the two is
# compiled, so the rest of the code never needs #ifdef. Outputs:
#   RINGGRAD_HAVE_CUDA, RINGGRAD_HAVE_MPI, RINGGRAD_HAVE_NCCL, RINGGRAD_HAVE_ONEDNN   ON/OFF
#   RINGGRAD_BACKEND_SOURCES                sources to add to the library
#   RINGGRAD_BACKEND_LIBS                   libraries to link publicly

set(RINGGRAD_BACKEND_SOURCES)
set(RINGGRAD_BACKEND_LIBS)

# ---- CUDA ----
set(RINGGRAD_HAVE_CUDA OFF)
if(NOT RINGGRAD_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90 (H100/H200) machine code plus PTX that newer GPUs can JIT.
      set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  # cuDNN (softmax / log-softmax): cudnn.h and libcudnn, in the CUDA toolkit, a
  # system path (NVIDIA's libcudnn9-dev-cuda-13), or under $CUDNN_HOME / $CUDNN_ROOT
  # (e.g. site-packages/nvidia/cudnn of the nvidia-cudnn-cu13 wheel). libcudnn.so.9
  # is cuDNN 9's shim: it loads the sub-libraries it needs (libcudnn_graph,
  # libcudnn_ops) from its own directory when first called.
  if(CUDAToolkit_FOUND)
    find_path(CUDNN_INCLUDE_DIR cudnn.h
              HINTS ENV CUDNN_HOME ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(CUDNN_LIBRARY cudnn
                 HINTS ENV CUDNN_HOME ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR}
                       ${CUDAToolkit_LIBRARY_ROOT}
                 PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  endif()
  string(CONCAT cudnn_hint "install cuDNN 9 (NVIDIA's CUDA apt repository: apt-get install "
                          "libcudnn9-dev-cuda-13, or pip install nvidia-cudnn-cu13 and set "
                          "CUDNN_HOME to its site-packages/nvidia/cudnn directory)")
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    set(RINGGRAD_HAVE_CUDA ON)
  elseif(RINGGRAD_CUDA STREQUAL "ON" AND NOT (CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND))
    message(FATAL_ERROR "RINGGRAD_CUDA=ON but no CUDA compiler/toolkit was found "
                        "(is nvcc on PATH? try -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)")
  elseif(RINGGRAD_CUDA STREQUAL "ON")
    string(CONCAT msg "RINGGRAD_CUDA=ON but cuDNN was not found (cudnn.h: ${CUDNN_INCLUDE_DIR}, "
                      "libcudnn: ${CUDNN_LIBRARY}), which the CUDA backend needs for softmax: "
                      "${cudnn_hint}, or build without CUDA: -DRINGGRAD_CUDA=OFF")
    message(FATAL_ERROR "${msg}")
  elseif(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    string(CONCAT msg "CUDA toolkit found but not cuDNN: building without the CUDA backend. To "
                      "build it, ${cudnn_hint}")
    message(WARNING "${msg}")
  endif()
endif()
if(RINGGRAD_HAVE_CUDA)
  # CMake 3.25 does not know nvcc's C++20 flag (3.26 does); teach it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  file(GLOB cuda_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/core/cuda/*.cu)
  list(APPEND RINGGRAD_BACKEND_SOURCES ${cuda_sources})
  # common.cuh includes cudnn.h; every source that includes common.cuh needs its directory.
  set_property(SOURCE ${cuda_sources} APPEND PROPERTY INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
  list(APPEND RINGGRAD_BACKEND_LIBS CUDA::cudart CUDA::cublas ${CUDNN_LIBRARY})
else()
  list(APPEND RINGGRAD_BACKEND_SOURCES ${CMAKE_SOURCE_DIR}/core/cuda/stub.cpp)
endif()

# ---- MPI ----
set(RINGGRAD_HAVE_MPI OFF)
if(NOT RINGGRAD_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(RINGGRAD_HAVE_MPI ON)
  elseif(RINGGRAD_MPI STREQUAL "ON")
    message(FATAL_ERROR "RINGGRAD_MPI=ON but no MPI was found (Debian: apt-get install libopenmpi-dev)")
  endif()
endif()

# parallel/mpi/*.cpp hold every use of <mpi.h>; a build without MPI compiles
# parallel/mpi/stub.cpp instead, whose make_mpi_communicator throws.
if(RINGGRAD_HAVE_MPI)
  file(GLOB mpi_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/parallel/mpi/*.cpp)
  list(REMOVE_ITEM mpi_sources ${CMAKE_SOURCE_DIR}/parallel/mpi/stub.cpp)
  list(APPEND RINGGRAD_BACKEND_SOURCES ${mpi_sources})
  list(APPEND RINGGRAD_BACKEND_LIBS MPI::MPI_CXX)
else()
  list(APPEND RINGGRAD_BACKEND_SOURCES ${CMAKE_SOURCE_DIR}/parallel/mpi/stub.cpp)
endif()

# ---- NCCL ----
# The communicator for CUDA tensors (RINGGRAD_NCCL=AUTO|ON|OFF; AUTO: when the
# CUDA backend is on and nccl.h and libnccl are found: in the CUDA toolkit, a
# system path such as Debian's libnccl-dev, or under $NCCL_HOME). It needs no
# MPI to build: the NCCL id travels over the Communicator interface (MPI under
# mpirun, nothing to send in a world of one).
set_property(CACHE RINGGRAD_NCCL PROPERTY STRINGS AUTO ON OFF)
set(RINGGRAD_HAVE_NCCL OFF)
if(RINGGRAD_HAVE_CUDA AND NOT RINGGRAD_NCCL STREQUAL "OFF")
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl
               HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(RINGGRAD_HAVE_NCCL ON)
  endif()
endif()
if(RINGGRAD_NCCL STREQUAL "ON" AND NOT RINGGRAD_HAVE_NCCL)
  message(FATAL_ERROR "RINGGRAD_NCCL=ON but NCCL is not usable: it needs the CUDA backend "
                      "(RINGGRAD_CUDA) and nccl.h + libnccl (Debian: apt-get install libnccl-dev, "
                      "or set NCCL_HOME to an NCCL install)")
endif()

# parallel/nccl/nccl_communicator.cpp holds every use of <nccl.h>; a build
# without NCCL compiles parallel/nccl/stub.cpp, whose factory throws.
if(RINGGRAD_HAVE_NCCL)
  set(nccl_source ${CMAKE_SOURCE_DIR}/parallel/nccl/nccl_communicator.cpp)
  list(APPEND RINGGRAD_BACKEND_SOURCES ${nccl_source})
  set_property(SOURCE ${nccl_source} APPEND PROPERTY INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR}
                                                                         ${CUDNN_INCLUDE_DIR})
  list(APPEND RINGGRAD_BACKEND_LIBS ${NCCL_LIBRARY})
else()
  list(APPEND RINGGRAD_BACKEND_SOURCES ${CMAKE_SOURCE_DIR}/parallel/nccl/stub.cpp)
endif()

# ---- oneDNN ----
# The CPU GEMM for float32 (RINGGRAD_ONEDNN=AUTO|ON|OFF; AUTO: when Debian's libdnnl-dev or
# another oneDNN with a CMake package is found). core/cpu/onednn/sgemm.cpp holds every use
# of <dnnl.h>; a build without it compiles core/cpu/onednn/stub.cpp and GEMMs run on Eigen.
set(RINGGRAD_HAVE_ONEDNN OFF)
if(NOT RINGGRAD_ONEDNN STREQUAL "OFF" AND NOT RINGGRAD_FUZZ)
  # Debian's oneDNN is built with its OpenCL GPU runtime, and its package config calls
  # find_package(OpenCL REQUIRED): without OpenCL's headers and loader that is a hard
  # configure error, so look for OpenCL first and leave oneDNN out (AUTO) when it is missing.
  find_package(OpenCL QUIET)
  find_path(RINGGRAD_DNNL_CONFIG_DIR dnnl-config.cmake
            PATH_SUFFIXES lib/x86_64-linux-gnu/cmake/dnnl lib/cmake/dnnl lib64/cmake/dnnl)
  set(dnnl_needs_opencl "")
  if(EXISTS "${RINGGRAD_DNNL_CONFIG_DIR}/dnnl-config.cmake")
    file(STRINGS "${RINGGRAD_DNNL_CONFIG_DIR}/dnnl-config.cmake" dnnl_needs_opencl
         REGEX "DNNL_GPU_RUNTIME \"OCL\"")
  endif()
  if(dnnl_needs_opencl AND NOT OpenCL_FOUND)
    set(dnnl_FOUND OFF)
    set(dnnl_why "its CMake package needs OpenCL, which was not found (Debian: apt-get install "
                 "ocl-icd-opencl-dev)")
  else()
    find_package(dnnl CONFIG QUIET)
    set(dnnl_why "not found (Debian: apt-get install libdnnl-dev, or set dnnl_DIR to a "
                 "oneDNN install's lib/cmake/dnnl)")
  endif()
  if(dnnl_FOUND)
    set(RINGGRAD_HAVE_ONEDNN ON)
  elseif(RINGGRAD_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "RINGGRAD_ONEDNN=ON but oneDNN: " ${dnnl_why})
  else()
    message(STATUS "ringgrad: oneDNN left out: " ${dnnl_why} "; float32 GEMMs run on Eigen")
  endif()
endif()
if(RINGGRAD_HAVE_ONEDNN)
  list(APPEND RINGGRAD_BACKEND_SOURCES ${CMAKE_SOURCE_DIR}/core/cpu/onednn/sgemm.cpp)
  list(APPEND RINGGRAD_BACKEND_LIBS DNNL::dnnl)
else()
  list(APPEND RINGGRAD_BACKEND_SOURCES ${CMAKE_SOURCE_DIR}/core/cpu/onednn/stub.cpp)
endif()

message(STATUS "ringgrad: CUDA backend ${RINGGRAD_HAVE_CUDA}, MPI ${RINGGRAD_HAVE_MPI}, "
               "NCCL ${RINGGRAD_HAVE_NCCL}, oneDNN ${RINGGRAD_HAVE_ONEDNN}")
if(RINGGRAD_HAVE_CUDA)
  message(STATUS "ringgrad: cuDNN ${CUDNN_LIBRARY}")
endif()
