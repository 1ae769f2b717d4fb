# Which GPU images each CUDA source carries: the one rule, read by
# CMakeLists.txt here (include) and by scripts/kernel-resources.sh, which runs
# it as a script to list every kernel file's images:
#   cmake [-DH3S_FAT_ARCHS=ON] -P src/backend/cuda/cuda_images.cmake
# prints "flags FLAG FLAG ..." (H3S_CUDA_FLAGS), then "FILE.cu IMAGE IMAGE ..."
# per .cu under src/backend/cuda.
#
# Every kernel file carries sm_90a machine code (the Hopper kernels: wgmma, TMA,
# setmaxnreg), sm_80 machine code (the mma.sync kernels, which also run on sm_86
# and sm_89: RTX 30 and 40 series, A100, L4, L40) and compute_80 PTX that the
# driver compiles for newer GPUs (Blackwell); kvi8s' fp8 mma.sync kernel adds
# sm_89 and sm_120 (below). H3S_FAT_ARCHS (the wheel, scripts/build-wheel.sh)
# gives each kernel machine code for every family it runs on instead: no driver
# compilation on RTX 30/40/50, and no image a kernel never runs in.
# arch/device_arch.hpp says at run time which image a device runs.
if(H3S_FAT_ARCHS)
  # sm_86 / sm_89 / sm_120: code scheduled for RTX 30 / 40 / 50 cards (sm_120:
  # no driver compile at first use); compute_80 PTX for GPUs after those.
  set(H3S_CUDA_IMAGES sm_80 sm_86 sm_89 sm_90a sm_120 compute_80)
  # The *_sm90.cu kernels run on Hopper only.
  set(H3S_CUDA_IMAGES_SM90 sm_90a)
  # kvi8s' fp8 mma.sync kernel runs on sm_89 and newer (Hopper under
  # --attn-kernel sm80 included); compute_89 PTX for GPUs after sm_120.
  set(H3S_CUDA_IMAGES_SM89 sm_89 sm_90a sm_120 compute_89)
else()
  set(H3S_CUDA_IMAGES sm_90a sm_80 compute_80)
  # (Their sm_80 and PTX images hold empty bodies: __CUDA_ARCH_FEAT_SM90_ALL.)
  set(H3S_CUDA_IMAGES_SM90 ${H3S_CUDA_IMAGES})
  # sm_89 machine code for RTX 40-series / L4 / L40, sm_120 for RTX 50-series
  # (its registers there: 236, no spills; the compute_80 PTX the rest of the
  # backend ships cannot hold it) and compute_89 PTX for GPUs after those; its
  # sm_80 image is a trap the dispatcher never launches.
  set(H3S_CUDA_IMAGES_SM89 ${H3S_CUDA_IMAGES} sm_89 sm_120 compute_89)
endif()

# nvcc's flags for every kernel file (with CMake's Release -O3 -DNDEBUG, C++20,
# and the include directories and definitions of the h3s_cuda target).
set(H3S_CUDA_FLAGS --expt-relaxed-constexpr -lineinfo
                   # Exactness: no fast math, no fma contraction of spelled-out
                   # products (the kernels use __fmaf_rn where they mean it).
                   -fmad=false -Xptxas=-warn-spills -Werror=all-warnings)

# The images of one .cu file (per file: a target-wide list could not leave the
# Hopper kernels out of the other images).
function(h3s_cuda_source_images source out)
  if(source MATCHES "_sm90\\.cu$")
    set(${out} ${H3S_CUDA_IMAGES_SM90} PARENT_SCOPE)
  elseif(source MATCHES "/attn_fwd_i8s_sm89\\.cu$")
    set(${out} ${H3S_CUDA_IMAGES_SM89} PARENT_SCOPE)
  else()
    set(${out} ${H3S_CUDA_IMAGES} PARENT_SCOPE)
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  list(JOIN H3S_CUDA_FLAGS " " flags)
  # (message() writes to stderr; echo to stdout.)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "flags ${flags}")
  file(GLOB_RECURSE sources RELATIVE ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/*.cu)
  list(SORT sources)
  foreach(source IN LISTS sources)
    h3s_cuda_source_images("/${source}" images)
    list(JOIN images " " images)
    execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${source} ${images}")
  endforeach()
endif()
