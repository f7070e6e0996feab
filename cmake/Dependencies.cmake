# Third-party libraries: Eigen 3.4 (always), GoogleTest (FA_BUILD_TESTS) and Google Benchmark
# (FA_BUILD_BENCHMARKS).
#
#   1. Installed packages first (find_package).
#   2. For what is missing, the pinned archive, checked against its SHA256: downloaded once into
#      <build>/_deps/downloads with file(DOWNLOAD) and handed to FetchContent as a local file.
#      Each server is first asked for a tiny file with a FA_DOWNLOAD_PROBE_TIMEOUT-second limit, so
#      a machine without network access stops in seconds instead of after FetchContent's five
#      retries (about 90 s).
#   3. When neither is possible, configure stops with the command that installs what is missing.
#
# Switches:
#   -DFA_DOWNLOAD_DEPENDENCIES=OFF        never download; stop with the install command instead
#   -DFETCHCONTENT_FULLY_DISCONNECTED=ON  the same, except that sources an earlier configure of
#                                         this build folder fetched are used
#   -DFA_DEPENDENCY_URL_BASE=<url>        fetch the archives from a mirror (https://... or
#                                         file:///...) holding eigen-3.4.0.tar.gz,
#                                         googletest-1.14.0.tar.gz and benchmark-1.8.3.tar.gz;
#                                         the pinned hashes still apply
#   -DFA_DOWNLOAD_PROBE_TIMEOUT=5         seconds the reachability probe of each server may take
#   -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON (GTest, benchmark): ignore an installed package
# .ci/missing_dependencies.cmake checks step 3 (configure only).
include(FetchContent)
if(POLICY CMP0135)
  cmake_policy(SET CMP0135 NEW)
endif()

option(FA_DOWNLOAD_DEPENDENCIES "Download third-party libraries that are not installed (pinned, hashed)" ON)
set(FA_DEPENDENCY_URL_BASE "" CACHE STRING
    "Mirror of the dependency archives (empty: the projects' own servers)")
set(FA_DOWNLOAD_PROBE_TIMEOUT 5 CACHE STRING
    "Seconds the reachability probe of a dependency server may take")

# Each library: its name in messages, the pinned archive and the package that installs it.
set(_fa_eigen_name   "Eigen 3.4")
set(_fa_eigen_file   eigen-3.4.0.tar.gz)
set(_fa_eigen_url    https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.gz)
set(_fa_eigen_sha256 8586084f71f9bde545ee7fa6d00288b264a2b7ac3607b974e54d13e7162c1c72)
set(_fa_eigen_apt    libeigen3-dev)
set(_fa_eigen_dnf    eigen3-devel)
set(_fa_eigen_brew   eigen)

set(_fa_googletest_name   "GoogleTest")
set(_fa_googletest_file   googletest-1.14.0.tar.gz)
set(_fa_googletest_url    https://github.com/google/googletest/archive/refs/tags/v1.14.0.tar.gz)
set(_fa_googletest_sha256 8ad598c73ad796e0d8280b082cebd82a630d73e73cd3c70057938a6501bba5d7)
set(_fa_googletest_apt    libgtest-dev)
set(_fa_googletest_dnf    gtest-devel)
set(_fa_googletest_brew   googletest)

set(_fa_googlebenchmark_name   "Google Benchmark")
set(_fa_googlebenchmark_file   benchmark-1.8.3.tar.gz)
set(_fa_googlebenchmark_url    https://github.com/google/benchmark/archive/refs/tags/v1.8.3.tar.gz)
set(_fa_googlebenchmark_sha256 6bc180a57d23d4d9515519f92b0c83d61b05b5bab188961f36ac7b06b0d9e9ce)
set(_fa_googlebenchmark_apt    libbenchmark-dev)
set(_fa_googlebenchmark_dnf    google-benchmark-devel)
set(_fa_googlebenchmark_brew   google-benchmark)

# --- 1. Installed packages ------------------------------------------------------------------------
set(_fa_missing "")
find_package(Eigen3 3.4 QUIET NO_MODULE)
if(TARGET Eigen3::Eigen)
  message(STATUS "Eigen ${Eigen3_VERSION}: installed")
else()
  list(APPEND _fa_missing eigen)
  if(Eigen3_CONSIDERED_VERSIONS)
    set(_fa_eigen_name "Eigen 3.4 (found ${Eigen3_CONSIDERED_VERSIONS}: too old)")
  endif()
endif()
if(FA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(TARGET GTest::gtest AND TARGET GTest::gtest_main)
    message(STATUS "GoogleTest ${GTest_VERSION}: installed")
  else()
    list(APPEND _fa_missing googletest)
  endif()
endif()
if(FA_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  if(TARGET benchmark::benchmark)
    message(STATUS "Google Benchmark ${benchmark_VERSION}: installed")
  else()
    list(APPEND _fa_missing googlebenchmark)
  endif()
endif()

# Stops configure: names what is missing, why it cannot be downloaded, and the install command for
# exactly the missing libraries.
function(_fa_stop_missing reason)
  set(names "")
  set(apt "")
  set(dnf "")
  set(brew "")
  foreach(dep IN LISTS _fa_missing)
    list(APPEND names "${_fa_${dep}_name}")
    list(APPEND apt ${_fa_${dep}_apt})
    list(APPEND dnf ${_fa_${dep}_dnf})
    list(APPEND brew ${_fa_${dep}_brew})
  endforeach()
  list(JOIN names ", " names)
  list(JOIN apt " " apt)
  list(JOIN dnf " " dnf)
  list(JOIN brew " " brew)
  # Without GoogleTest or Google Benchmark the chapters and the tour still build.
  set(without "")
  if(NOT "eigen" IN_LIST _fa_missing)
    set(off "")
    if("googletest" IN_LIST _fa_missing)
      string(APPEND off " -DFA_BUILD_TESTS=OFF")
    endif()
    if("googlebenchmark" IN_LIST _fa_missing)
      string(APPEND off " -DFA_BUILD_BENCHMARKS=OFF")
    endif()
    set(without "Or build the chapters and the tour without them:\n"
                "    cmake --preset default${off}\n")
  endif()
  message(FATAL_ERROR
    "Not installed: ${names}. A download is not possible: ${reason}.\n"
    "Install, then run the same cmake command again:\n"
    "    sudo apt-get install -y ${apt}\n"
    "    (Fedora: sudo dnf install -y ${dnf})\n"
    "    (macOS:  brew install ${brew})\n"
    ${without})
endfunction()

# Asks the server of `url` for /robots.txt within FA_DOWNLOAD_PROBE_TIMEOUT seconds. Any answer,
# an HTTP error included (curl status 22), means the server is reachable.
function(_fa_probe url out_reason)
  set(${out_reason} "" PARENT_SCOPE)
  if(url MATCHES "^file://")
    return()  # a missing local file is reported by the download itself, at once
  endif()
  string(REGEX MATCH "^[A-Za-z]+://[^/]+" root "${url}")
  file(DOWNLOAD "${root}/robots.txt" TIMEOUT ${FA_DOWNLOAD_PROBE_TIMEOUT} STATUS status)
  list(GET status 0 code)
  if(NOT code EQUAL 0 AND NOT code EQUAL 22)
    list(GET status 1 text)
    string(REPLACE "\"" "" text "${text}")
    set(${out_reason} "${root} is not reachable (${text}; probe limit ${FA_DOWNLOAD_PROBE_TIMEOUT} s)"
        PARENT_SCOPE)
  endif()
endfunction()

# --- 2. Pinned downloads of what is missing -------------------------------------------------------
if(_fa_missing)
  set(_fa_downloads ${FETCHCONTENT_BASE_DIR}/downloads)
  foreach(dep IN LISTS _fa_missing)
    string(TOUPPER ${dep} _fa_upper)
    if(FA_DEPENDENCY_URL_BASE)
      string(REGEX REPLACE "/+$" "" _fa_base "${FA_DEPENDENCY_URL_BASE}")
      set(_fa_url "${_fa_base}/${_fa_${dep}_file}")
    else()
      set(_fa_url "${_fa_${dep}_url}")
    endif()
    set(_fa_archive ${_fa_downloads}/${_fa_${dep}_file})
    set(_fa_have_archive OFF)
    if(EXISTS ${_fa_archive})
      file(SHA256 ${_fa_archive} _fa_sha)
      if(_fa_sha STREQUAL _fa_${dep}_sha256)
        set(_fa_have_archive ON)
      endif()
    endif()

    if(DEFINED FETCHCONTENT_SOURCE_DIR_${_fa_upper})
      # The user points FetchContent at a source tree: nothing to download.
    elseif(FETCHCONTENT_FULLY_DISCONNECTED)
      if(NOT EXISTS ${FETCHCONTENT_BASE_DIR}/${dep}-src)
        _fa_stop_missing("FETCHCONTENT_FULLY_DISCONNECTED=ON and no earlier download here")
      endif()
    elseif(NOT _fa_have_archive)
      if(NOT FA_DOWNLOAD_DEPENDENCIES)
        _fa_stop_missing("downloads are switched off (FA_DOWNLOAD_DEPENDENCIES=OFF)")
      endif()
      _fa_probe("${_fa_url}" _fa_reason)
      if(_fa_reason)
        _fa_stop_missing("${_fa_reason}")
      endif()
      message(STATUS "${_fa_${dep}_name} not installed: downloading ${_fa_url}")
      file(DOWNLOAD "${_fa_url}" ${_fa_archive}.part INACTIVITY_TIMEOUT 30 STATUS _fa_status)
      list(GET _fa_status 0 _fa_code)
      if(_fa_code EQUAL 0)
        file(SHA256 ${_fa_archive}.part _fa_sha)
        if(NOT _fa_sha STREQUAL _fa_${dep}_sha256)
          set(_fa_code -1)
          set(_fa_status "-1;SHA256 ${_fa_sha}, expected ${_fa_${dep}_sha256}")
        endif()
      endif()
      if(NOT _fa_code EQUAL 0)
        file(REMOVE ${_fa_archive}.part)
        list(GET _fa_status 1 _fa_text)
        string(REPLACE "\"" "" _fa_text "${_fa_text}")
        _fa_stop_missing("${_fa_url} failed (${_fa_text})")
      endif()
      file(RENAME ${_fa_archive}.part ${_fa_archive})
    endif()
    message(STATUS "${_fa_${dep}_name}: pinned ${_fa_${dep}_file}")
    # A source subfolder without a CMakeLists.txt makes FetchContent_MakeAvailable unpack Eigen
    # without adding Eigen's own (large) CMake project; the headers are all that is used.
    set(_fa_subdir "")
    if(dep STREQUAL "eigen")
      set(_fa_subdir SOURCE_SUBDIR headers-only)
    endif()
    FetchContent_Declare(${dep} URL ${_fa_archive} URL_HASH SHA256=${_fa_${dep}_sha256}
                         ${_fa_subdir})
  endforeach()

  if("googletest" IN_LIST _fa_missing)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  endif()
  if("googlebenchmark" IN_LIST _fa_missing)
    set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_GTEST_TESTS OFF CACHE BOOL "" FORCE)
  endif()
  FetchContent_MakeAvailable(${_fa_missing})
  if("eigen" IN_LIST _fa_missing)
    add_library(Eigen3::Eigen INTERFACE IMPORTED GLOBAL)
    target_include_directories(Eigen3::Eigen SYSTEM INTERFACE ${eigen_SOURCE_DIR})
  endif()
endif()

if(FA_BUILD_TESTS)
  include(GoogleTest)
endif()
