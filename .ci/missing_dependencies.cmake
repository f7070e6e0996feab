# CI check of cmake/Dependencies.cmake on a machine where the libraries are "absent": configure
# (no build) with the installed packages hidden and the downloads pointed at a host that cannot
# resolve (.invalid, RFC 6761), and require that configure stops within seconds with the install
# command for exactly the missing libraries.
#
#   cmake -P .ci/missing_dependencies.cmake
#
# Needs Eigen and GoogleTest installed (the last case hides only Google Benchmark).
cmake_minimum_required(VERSION 3.25)
get_filename_component(src "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(bin "${src}/build-ci-missing-deps")
set(limit_s 10)
file(REMOVE_RECURSE "${bin}")

# Runs one configure of the project; `expect` must appear in its output and `reject` must not.
function(configure_case title expect reject timed)
  string(TIMESTAMP t0 "%s")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${src}" -B "${bin}" -G Ninja ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 300)
  string(TIMESTAMP t1 "%s")
  math(EXPR dt "${t1} - ${t0}")
  # The error text is wrapped at 80 columns: compare with the line breaks folded away.
  string(REGEX REPLACE "[ \n]+" " " flat "${out}")
  set(why "")
  if(rc EQUAL 0)
    set(why "configure succeeded")
  elseif(NOT flat MATCHES "${expect}")
    set(why "no '${expect}' in the output")
  elseif(reject AND flat MATCHES "${reject}")
    set(why "'${reject}' in the output")
  elseif(timed AND dt GREATER limit_s)
    set(why "took ${dt} s (limit ${limit_s} s)")
  endif()
  if(why)
    message(FATAL_ERROR "missing dependencies, ${title}: ${why}\n${out}")
  endif()
  message(STATUS "missing dependencies, ${title}: stopped in ${dt} s with the install command")
endfunction()

set(hide_all -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
             -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
set(all "sudo apt-get install -y libeigen3-dev libgtest-dev libbenchmark-dev")

# The first configure detects the compilers (seconds to a minute on a loaded machine); the timed
# repeat measures what the README's first command adds when the libraries are missing.
configure_case("all three, unreachable server" "${all}" "Retry" OFF
               ${hide_all} -DFA_DEPENDENCY_URL_BASE=https://fa-deps.invalid/archives)
configure_case("all three, unreachable server, timed" "${all}" "Retry" ON
               ${hide_all} -DFA_DEPENDENCY_URL_BASE=https://fa-deps.invalid/archives)
configure_case("all three, upstream servers blocked by FETCHCONTENT_FULLY_DISCONNECTED"
               "${all}" "Retry" ON ${hide_all} -DFA_DEPENDENCY_URL_BASE=
               -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
configure_case("Google Benchmark only, downloads off"
               "sudo apt-get install -y libbenchmark-dev \\(Fedora" "libeigen3-dev|libgtest-dev" ON
               -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=OFF -DCMAKE_DISABLE_FIND_PACKAGE_GTest=OFF
               -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON -DFETCHCONTENT_FULLY_DISCONNECTED=OFF
               -DFA_DOWNLOAD_DEPENDENCIES=OFF)
file(REMOVE_RECURSE "${bin}")
