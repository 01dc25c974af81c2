# SPDX-License-Identifier: Apache-2.0
# Finds kvtier's dependencies and records why an optional feature is off.
# Required: liburing, liblz4, libblosc, libzstd, libxxhash, jansson, OpenSSL libcrypto, threads,
# OpenBLAS (bench; KVT_WITH_OPENBLAS=OFF leaves the recompute bench out).
# Optional: cmocka (tests), hiredis (the cluster), libibverbs + librdmacm
# (RDMA), CUDA (kernels).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

set(KVT_SUMMARY "")
macro(kvt_feature name on why)
  if(${on})
    list(APPEND KVT_SUMMARY "  ${name}: ON")
  else()
    list(APPEND KVT_SUMMARY "  ${name}: OFF (${why})")
  endif()
endmacro()

function(kvt_require_pkg alias module debian)
  pkg_check_modules(${alias} IMPORTED_TARGET ${module})
  if(NOT ${alias}_FOUND)
    message(FATAL_ERROR "kvtier needs ${module}: apt-get install ${debian} "
                        "(or run 'make deps' as root)")
  endif()
  add_library(kvt::${alias} ALIAS PkgConfig::${alias})
endfunction()

kvt_require_pkg(uring   liburing   liburing-dev)
kvt_require_pkg(lz4     liblz4     liblz4-dev)
# SIMD byte/bit shuffles + LZ4 of the SSD tier's default block codec
kvt_require_pkg(blosc   blosc      libblosc-dev)
# zstd called directly on the exponent byte plane (codec shuf16-zstd): kept
# contexts per thread and literal settings c-blosc 1.x cannot pass
kvt_require_pkg(zstd    libzstd    libzstd-dev)
kvt_require_pkg(xxhash  libxxhash  libxxhash-dev)
kvt_require_pkg(jansson jansson    libjansson-dev)
# CPU GEMMs of kvtier-bench recompute (the prefill workload where no GPU exists)
if(KVT_WITH_OPENBLAS)
  kvt_require_pkg(openblas openblas  libopenblas-dev)
endif()
kvt_feature("kvtier-bench recompute (OpenBLAS)" KVT_WITH_OPENBLAS "KVT_WITH_OPENBLAS=OFF")

if(KVT_BUILD_TESTS)
  pkg_check_modules(cmocka IMPORTED_TARGET cmocka)
  if(NOT cmocka_FOUND)
    message(FATAL_ERROR "the tests need cmocka: apt-get install libcmocka-dev "
                        "(or configure with -DKVT_BUILD_TESTS=OFF)")
  endif()
  add_library(kvt::cmocka ALIAS PkgConfig::cmocka)
endif()

# The cluster (cluster/, the peer transports of transport/): its directory's
# Redis client is hiredis. Without it the rest of kvtier builds as before.
set(KVT_HAVE_CLUSTER OFF)
if(KVT_WITH_CLUSTER)
  pkg_check_modules(hiredis IMPORTED_TARGET hiredis)
  if(hiredis_FOUND)
    set(KVT_HAVE_CLUSTER ON)
    add_library(kvt::hiredis ALIAS PkgConfig::hiredis)
  endif()
  kvt_feature("cluster: directory on Redis, peer transports (hiredis)" KVT_HAVE_CLUSTER
              "libhiredis-dev not found")
else()
  kvt_feature("cluster: directory on Redis, peer transports (hiredis)" OFF "KVT_WITH_CLUSTER=OFF")
endif()

set(KVT_HAVE_RDMA OFF)
if(KVT_WITH_RDMA)
  pkg_check_modules(ibverbs IMPORTED_TARGET libibverbs)
  pkg_check_modules(rdmacm IMPORTED_TARGET librdmacm)
  if(ibverbs_FOUND AND rdmacm_FOUND)
    set(KVT_HAVE_RDMA ON)
    add_library(kvt::ibverbs ALIAS PkgConfig::ibverbs)
    add_library(kvt::rdmacm ALIAS PkgConfig::rdmacm)
  endif()
  kvt_feature("RDMA transport (libibverbs)" KVT_HAVE_RDMA
              "libibverbs-dev/librdmacm-dev not found")
else()
  kvt_feature("RDMA transport (libibverbs)" OFF "KVT_WITH_RDMA=OFF")
endif()

set(KVT_HAVE_CUDA OFF)
if(KVT_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(KVT_HAVE_CUDA ON)
  endif()
  kvt_feature("CUDA kernels (nvcc)" KVT_HAVE_CUDA "nvcc not found; host backend only")
else()
  kvt_feature("CUDA kernels (nvcc)" OFF "KVT_WITH_CUDA=OFF; host backend only")
endif()

function(kvt_print_feature_summary)
  string(REPLACE ";" "\n" lines "${KVT_SUMMARY}")
  message(STATUS "kvtier ${PROJECT_VERSION} (${CMAKE_BUILD_TYPE} ${KVT_SANITIZE}) features:\n${lines}")
endfunction()
