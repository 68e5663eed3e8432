# GPU tests (tests/gpu/*_test.cpp), each built once and registered twice:
#  gpu.*      against the real CUDA driver (libcuda.so.1); on a host without
#             a GPU (CI) every case reports skipped with the reason;
#  gpu_sim.*  against tests/gpu/sim's stand-in driver, whose "device memory"
#             the host cannot touch and whose copies are asynchronous, and
#             its stand-in libcufile (HAWSER_FAKE_CUFILE, compiled in): the
#             GPU paths' logic runs in CI.
# scripts/gpu_test.sh runs the gpu.* cases on a machine with GPUs.
add_library(hawser_fake_cuda SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu/sim/fake_cuda.cpp)
target_link_libraries(hawser_fake_cuda PRIVATE Threads::Threads)
set_target_properties(hawser_fake_cuda PROPERTIES CXX_VISIBILITY_PRESET default)
# The stand-in libcufile (compat mode, out-of-order completions, 128-entry
# batches, a hook to refuse a file): it reaches fake device memory through
# the stand-in driver's cuMemcpy.
add_library(hawser_fake_cufile SHARED ${CMAKE_CURRENT_SOURCE_DIR}/gpu/sim/fake_cufile.cpp)
target_link_libraries(hawser_fake_cufile PRIVATE hawser_fake_cuda Threads::Threads)
set_target_properties(hawser_fake_cufile PROPERTIES CXX_VISIBILITY_PRESET default)
# The stand-ins replace C libraries that are never instrumented, and declare
# the handle types in their own words (void** for CUcontext*): clang's
# -fsanitize=function (part of UBSan) would flag hawser's calls through its
# own typedefs as type mismatches. Compiled without that one check.
if(HAWSER_SANITIZE STREQUAL "address" AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  target_compile_options(hawser_fake_cuda PRIVATE -fno-sanitize=function)
  target_compile_options(hawser_fake_cufile PRIVATE -fno-sanitize=function)
endif()

file(GLOB gpu_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/*_test.cpp)
foreach(src ${gpu_tests})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE hawser_testlib GTest::gtest_main)
  add_dependencies(${name} hawser_cli hawser_fake_cuda hawser_fake_cufile)
  # With the stand-in driver, the stand-in libcufile too (gpu_env.h:
  # testCufilePath): HAWSER_FAKE_CUFILE comes with hawser_testlib.
  if(NOT name STREQUAL "cuda_abi_test")  # its own include path and definitions
    hawser_test_pch(${name})
  endif()
  hawser_gtest(${name} gpu gpu)
  hawser_gtest(${name} gpu_sim gpu_sim ENV "HAWSER_TEST_CUDA_DRIVER=$<TARGET_FILE:hawser_fake_cuda>")
endforeach()

# The C API's GPU memory calls, against the stand-in driver (tests/c).
if(TARGET c_c_device_memory_test)
  target_compile_definitions(c_c_device_memory_test PRIVATE HAWSER_FAKE_CUDA="$<TARGET_FILE:hawser_fake_cuda>")
  add_dependencies(c_c_device_memory_test hawser_fake_cuda)
endif()

# The rdma GPU test runs the rdma transport over the software verbs provider.
# So does the rdma part of the suite with GPU memory.
if(HAWSER_RDMA_BUILT)
  add_dependencies(rdma_gpu_test hawser_softverbs)
  add_dependencies(gpu_memory_suite_test hawser_softverbs)
endif()

# cuda_abi_test checks src/gpu/cuda_api.h against the toolkit's cuda.h.
find_path(HAWSER_CUDA_INCLUDE cuda.h PATHS /usr/local/cuda/include NO_DEFAULT_PATH)
if(HAWSER_CUDA_INCLUDE AND TARGET cuda_abi_test)
  target_include_directories(cuda_abi_test SYSTEM PRIVATE ${HAWSER_CUDA_INCLUDE})
  target_compile_definitions(cuda_abi_test PRIVATE HAWSER_HAVE_CUDA_H=1)
endif()

# The copy kernel's committed PTX is what nvcc makes of its source
# (scripts/gen_copy_kernel.sh): checked where nvcc is installed.
find_program(HAWSER_NVCC nvcc PATHS /usr/local/cuda/bin)
if(HAWSER_NVCC)
  add_test(NAME gpu.copy_kernel_ptx_matches_its_source
    COMMAND bash -c "out=$(mktemp) && NVCC='${HAWSER_NVCC}' '${CMAKE_SOURCE_DIR}/scripts/gen_copy_kernel.sh' \"$out\" && cmp \"$out\" '${CMAKE_SOURCE_DIR}/src/gpu/copy_kernel.ptx'; rc=$?; rm -f \"$out\"; exit $rc")
  set_tests_properties(gpu.copy_kernel_ptx_matches_its_source PROPERTIES LABELS gpu_sim)
endif()
