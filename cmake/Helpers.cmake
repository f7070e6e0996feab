# fa_add_chapter(NUMBER 01 NAME ch01_safe_softmax SOURCES kernels.cu chapter.cpp ...)
#
# A chapter is an OBJECT library (its kernels, its CPU models and its program body) plus a tiny
# program built from common/chapter_main.cpp. OBJECT libraries keep every object file, so the
# static registration lines in the kernels always run: the chapter program, the tour, the tests
# and the benchmarks all see the same registered kernels.
set_property(GLOBAL PROPERTY FA_CHAPTER_LIBS "")

function(fa_add_chapter)
  cmake_parse_arguments(CH "" "NUMBER;NAME" "SOURCES" ${ARGN})
  set(lib fa_ch${CH_NUMBER})
  if(FA_BUILD_EXERCISES)
    # The exercise build: where exercises/<file> exists (generated from a marked solution), the
    # student's version replaces the solution, under the same registered name, so every test,
    # benchmark and chapter program runs the student's code.
    set(_sources "")
    foreach(src IN LISTS CH_SOURCES)
      get_filename_component(_name ${src} NAME)
      if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/exercises/${_name})
        list(APPEND _sources ${CMAKE_CURRENT_SOURCE_DIR}/exercises/${_name})
        message(STATUS "exercise: chapter ${CH_NUMBER} builds exercises/${_name}")
      else()
        list(APPEND _sources ${src})
      endif()
    endforeach()
    set(CH_SOURCES ${_sources})
  endif()
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
# OBJECT library that joins the chapter's program, the tour, the tests and the benchmarks.
function(fa_add_chapter_sm90a)
  cmake_parse_arguments(CH "" "NUMBER;NAME" "SOURCES" ${ARGN})
  set(lib fa_ch${CH_NUMBER}_sm90a)
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
