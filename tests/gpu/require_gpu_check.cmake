# ctest gpu_required_fails_without_a_device: runs the GPU suite with every device hidden
# (CUDA_VISIBLE_DEVICES=-1), so it holds on any machine. Without H3S_REQUIRE_GPU the tests
# skip and the run passes; with H3S_REQUIRE_GPU=1 the same tests must fail, naming why.
#   cmake -DBIN=path/to/h3s_tests_gpu -P require_gpu_check.cmake
set(filter "GpuForward.*:*GpuBlockExact.StreamedEqualsStockBitForBit*:GpuOps.Attention*")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES=-1 --unset=H3S_REQUIRE_GPU
          ${BIN} --gtest_filter=${filter}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "SKIPPED")
  message(FATAL_ERROR "without H3S_REQUIRE_GPU the GPU tests should skip (rc ${rc}):\n${out}${err}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES=-1 H3S_REQUIRE_GPU=1
          ${BIN} --gtest_filter=${filter}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "H3S_REQUIRE_GPU=1 without a device passed:\n${out}${err}")
endif()
if(NOT out MATCHES "H3S_REQUIRE_GPU is set but" OR out MATCHES "\\[  SKIPPED \\]")
  message(FATAL_ERROR "H3S_REQUIRE_GPU=1 failed without saying why, or still skipped:\n${out}")
endif()
message(STATUS "GPU tests skip without H3S_REQUIRE_GPU and fail with it")
