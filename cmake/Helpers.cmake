# fa_add_chapter(NUMBER 01 NAME ch01_safe_softmax SOURCES kernels.cu chapter.cpp ...)
#
# A chapter is an OBJECT library (its kernels, its CPU models and its program body) plus a tiny
# program built from common/chapter_main.cpp. OBJECT libraries keep every object file, so the
# static registration lines in the kernels always run: the chapter program, the tour, the tests
# and the benchmarks all see the same registered kernels.
set_property(GLOBAL PROPERTY FA_CHAPTER_LIBS "")

# _fa_exercise_sources(<out-var> <chapter number> <sources...>): the sources of a chapter's
# library in this build. In the exercise build (FA_BUILD_EXERCISES), where <dir>/exercises/<file>
# exists beside a source <dir>/<file> (generated from a marked solution, common/exercise.h), the
# student's version replaces the solution, under the same registered name, so every test,
# benchmark and chapter program runs the student's code. Otherwise the sources unchanged.
function(_fa_exercise_sources out number)
  set(_sources "")
  foreach(src IN LISTS ARGN)
    get_filename_component(_name ${src} NAME)
    get_filename_component(_dir ${src} DIRECTORY)
    if(NOT IS_ABSOLUTE "${_dir}")
      set(_dir ${CMAKE_CURRENT_SOURCE_DIR}/${_dir})
    endif()
    if(FA_BUILD_EXERCISES AND EXISTS ${_dir}/exercises/${_name})
      list(APPEND _sources ${_dir}/exercises/${_name})
      file(RELATIVE_PATH _shown ${CMAKE_CURRENT_SOURCE_DIR} ${_dir}/exercises/${_name})
      message(STATUS "exercise: chapter ${number} builds ${_shown}")
    else()
      list(APPEND _sources ${src})
    endif()
  endforeach()
  set(${out} ${_sources} PARENT_SCOPE)
endfunction()

function(fa_add_chapter)
  cmake_parse_arguments(CH "" "NUMBER;NAME" "SOURCES" ${ARGN})
  set(lib fa_ch${CH_NUMBER})
  _fa_exercise_sources(CH_SOURCES ${CH_NUMBER} ${CH_SOURCES})
  add_library(${lib} OBJECT ${CH_SOURCES})
  target_link_libraries(${lib} PUBLIC fa_common)
  target_include_directories(${lib} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  add_executable(${CH_NAME} ${PROJECT_SOURCE_DIR}/common/chapter_main.cpp)
  target_compile_definitions(${CH_NAME} PRIVATE FA_CHAPTER_NUMBER="${CH_NUMBER}")
  target_link_libraries(${CH_NAME} PRIVATE ${lib} fa_refs)
  if(TARGET fa_user)  # the reader's own kernels (chapters/user/) appear in every chapter program
    target_link_libraries(${CH_NAME} PRIVATE fa_user)
  endif()
  set_property(GLOBAL APPEND PROPERTY FA_CHAPTER_LIBS ${lib})
endfunction()

# fa_link_all_chapters(<target>): link every chapter's kernels into a test, benchmark or the tour.
function(fa_link_all_chapters target)
  get_property(libs GLOBAL PROPERTY FA_CHAPTER_LIBS)
  target_link_libraries(${target} PRIVATE ${libs} fa_common)
endfunction()

# fa_add_chapter_sm90a(NUMBER 03 NAME ch03_tiled_matmul SOURCES sm90a/v6.cu ...): a chapter's
# Hopper-only kernels, compiled for sm_90a alone (wgmma and TMA exist only there) into a second
# OBJECT library that joins the chapter's program, the tour, the tests and the benchmarks. In the
# exercise build, sm90a/exercises/<file> replaces sm90a/<file> as in fa_add_chapter.
function(fa_add_chapter_sm90a)
  cmake_parse_arguments(CH "" "NUMBER;NAME" "SOURCES" ${ARGN})
  set(lib fa_ch${CH_NUMBER}_sm90a)
  _fa_exercise_sources(CH_SOURCES ${CH_NUMBER} ${CH_SOURCES})  # sm90a/exercises/<file> likewise
  add_library(${lib} OBJECT ${CH_SOURCES})
  target_link_libraries(${lib} PUBLIC fa_common)
  target_include_directories(${lib} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  # CUDA_ARCHITECTURES OFF: the flag below is the only architecture (CMake before 3.29 has no
  # spelling for "90a" in CUDA_ARCHITECTURES that every supported version understands).
  set_target_properties(${lib} PROPERTIES CUDA_ARCHITECTURES OFF)
  target_compile_options(${lib} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a>)
  target_link_libraries(${CH_NAME} PRIVATE ${lib})
  set_property(GLOBAL APPEND PROPERTY FA_CHAPTER_LIBS ${lib})
endfunction()
