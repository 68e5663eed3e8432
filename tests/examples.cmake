# The examples (examples/) run as tests: kv_handoff moves a request's KV
# cache between two processes and exits non-zero unless decode verified
# every block. In host memory, and in "GPU memory" of the stand-in CUDA
# driver (tests/gpu.cmake), which runs its --gpu path in CI.
if(TARGET kv_handoff)
  add_test(NAME examples.kv_handoff_host_memory COMMAND kv_handoff)
  set_tests_properties(examples.kv_handoff_host_memory PROPERTIES LABELS integration TIMEOUT 120)
  add_test(NAME examples.kv_handoff_gpu_memory_sim COMMAND kv_handoff --gpu)
  set_tests_properties(examples.kv_handoff_gpu_memory_sim PROPERTIES LABELS gpu_sim TIMEOUT 120
    ENVIRONMENT "HAWSER_GPU_CUDA_DRIVER=$<TARGET_FILE:hawser_fake_cuda>")
endif()
