# Third-party libraries: installed packages first (find_package), then a pinned, hashed download
# with FetchContent for machines that lack them. Eigen is header-only; GoogleTest and Google
# Benchmark build in a few minutes when fetched.
include(FetchContent)
if(POLICY CMP0135)
  cmake_policy(SET CMP0135 NEW)
endif()

find_package(Eigen3 3.4 QUIET NO_MODULE)
if(NOT TARGET Eigen3::Eigen)
  message(STATUS "Eigen 3.4 not installed: fetching 3.4.0")
  FetchContent_Declare(eigen
    URL https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.gz
    URL_HASH SHA256=8586084f71f9bde545ee7fa6d00288b264a2b7ac3607b974e54d13e7162c1c72)
  FetchContent_GetProperties(eigen)
  if(NOT eigen_POPULATED)
    FetchContent_Populate(eigen)   # headers only: skip Eigen's own (large) CMake project
  endif()
  add_library(Eigen3::Eigen INTERFACE IMPORTED GLOBAL)
  target_include_directories(Eigen3::Eigen SYSTEM INTERFACE ${eigen_SOURCE_DIR})
else()
  message(STATUS "Eigen ${Eigen3_VERSION}: installed")
endif()

if(FA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT TARGET GTest::gtest)
    message(STATUS "GoogleTest not installed: fetching 1.14.0")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    FetchContent_Declare(googletest
      URL https://github.com/google/googletest/archive/refs/tags/v1.14.0.tar.gz
      URL_HASH SHA256=8ad598c73ad796e0d8280b082cebd82a630d73e73cd3c70057938a6501bba5d7)
    FetchContent_MakeAvailable(googletest)
  else()
    message(STATUS "GoogleTest ${GTest_VERSION}: installed")
  endif()
  include(GoogleTest)
endif()

if(FA_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  if(NOT TARGET benchmark::benchmark)
    message(STATUS "Google Benchmark not installed: fetching 1.8.3")
    set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_GTEST_TESTS OFF CACHE BOOL "" FORCE)
    FetchContent_Declare(googlebenchmark
      URL https://github.com/google/benchmark/archive/refs/tags/v1.8.3.tar.gz
      URL_HASH SHA256=6bc180a57d23d4d9515519f92b0c83d61b05b5bab188961f36ac7b06b0d9e9ce)
    FetchContent_MakeAvailable(googlebenchmark)
  else()
    message(STATUS "Google Benchmark ${benchmark_VERSION}: installed")
  endif()
endif()
