# signal_sender: the initiator process of the signal tests (tests/signals/),
# which they start, kill and cut off; its path reaches every test program
# (one set of definitions: HAWSER_TEST_PCH), and the programs that start it
# depend on it.
add_executable(signal_sender ${CMAKE_CURRENT_SOURCE_DIR}/signals/signal_sender.cpp)
target_link_libraries(signal_sender PRIVATE hawser_testlib)
set_target_properties(signal_sender PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
target_compile_definitions(hawser_testlib PUBLIC HAWSER_SIGNAL_SENDER="$<TARGET_FILE:signal_sender>")
foreach(t signal_faults_test tcp_suite_test shm_suite_test rdma_suite_test nvlink_suite_test gpu_memory_suite_test tcp_gpu_test
    rdma_gpu_test)
  if(TARGET ${t})
    add_dependencies(${t} signal_sender)
  endif()
endforeach()
