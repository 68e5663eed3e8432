# libFuzzer targets (HAWSER_FUZZ: clang, address build): one program per
# tests/fuzz/<name>_fuzz.cpp, in <build>/fuzz/, linked against the same
# library objects as the tests. Each one's seed corpus (and the regression
# inputs of every crash found) lives in tests/fuzz/corpus/<name>/; ctest
# replays it (fuzz.<name>), and scripts/fuzz.sh fuzzes each target for a
# bounded time (docs/testing.md).
if(HAWSER_FUZZ)
  file(GLOB fuzz_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/fuzz/*_fuzz.cpp)
  foreach(src ${fuzz_sources})
    get_filename_component(target ${src} NAME_WE)
    string(REGEX REPLACE "_fuzz$" "" name ${target})
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE hawser_internal)
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    set(corpus ${CMAKE_CURRENT_LIST_DIR}/fuzz/corpus/${name})
    if(NOT IS_DIRECTORY ${corpus})
      message(FATAL_ERROR "fuzz target ${target} has no seed corpus ${corpus}")
    endif()
    add_test(NAME fuzz.${name} COMMAND ${target} -runs=0 ${corpus})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 120)
  endforeach()
endif()
