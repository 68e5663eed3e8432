# RDMA tests run the real rdma transport over a software verbs provider
# (tests/softverbs): libhawser_softverbs.so exports the libibverbs entry
# points; tests point HAWSER_RDMA_VERBS_LIB at it (HAWSER_SOFTVERBS_LIB below).
if(HAWSER_RDMA_BUILT)
  add_library(hawser_softverbs SHARED ${CMAKE_CURRENT_LIST_DIR}/softverbs/softverbs.cpp)
  target_include_directories(hawser_softverbs PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(hawser_softverbs PRIVATE Threads::Threads)
  set_target_properties(hawser_softverbs PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
  # rdma_child: the target process of rdma_multiprocess_test (tests/rdma/),
  # a helper program, not a test; its path reaches every test program (one
  # set of definitions: HAWSER_TEST_PCH).
  add_executable(rdma_child ${CMAKE_CURRENT_LIST_DIR}/rdma/rdma_child.cpp)
  target_link_libraries(rdma_child PRIVATE hawser_testlib)
  target_compile_definitions(hawser_testlib PUBLIC HAWSER_RDMA_CHILD="$<TARGET_FILE:rdma_child>")
  if(TARGET rdma_multiprocess_test)
    add_dependencies(rdma_multiprocess_test rdma_child)
  endif()
endif()

foreach(tier unit integration faults)
  file(GLOB rdma_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/${tier}/rdma_*_test.cpp)
  foreach(src ${rdma_tests})
    get_filename_component(name ${src} NAME_WE)
    if(HAWSER_RDMA_BUILT)
      # HAWSER_TEST_RDMA and HAWSER_SOFTVERBS_LIB come with hawser_testlib.
      add_dependencies(${name} hawser_softverbs)
    endif()
  endforeach()
endforeach()
