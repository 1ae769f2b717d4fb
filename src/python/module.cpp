// The native half of the `h3stream` Python package: h3stream._h3stream. The
// pure-Python half (python/h3stream) wraps it with the documented API.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "backend/attn_tile.hpp"
#include "python/bindings.hpp"
#include "runtime/engine_backend.hpp"

namespace nb = nanobind;

NB_MODULE(_h3stream, m) {
  m.doc() = "h3stream native module: exact streamed MiniMax-H3 DiT blocks over DLPack tensors";
  m.attr("__version__") = H3S_VERSION;
  // kv_block must be 0 or a multiple of it (the ComfyUI node's step).
  m.attr("ATTN_KV_TILE") = h3s::kAttnKvTile;
  m.def("cuda_built", &h3s::cuda_built,
        "True when this build has the CUDA backend (a GPU may still be missing).");
  m.def("cuda_device_count", &h3s::cuda_device_count,
        "Visible CUDA devices (0 without the CUDA backend, a driver or a device).");
  // build_info() (python/h3stream/_build_info.py) and the import's driver check (_load.py).
  m.attr("GIT_COMMIT") = H3S_GIT_COMMIT;
  m.def("cuda_runtime_version", &h3s::cuda_runtime_version,
        "The CUDA runtime linked in (1000 * major + 10 * minor); 0 without the CUDA backend.");
  m.def("cuda_driver_version", &h3s::cuda_driver_version,
        "The newest CUDA version the driver supports (same form); 0 without CUDA or a driver.");
  m.def(
      "cuda_images",
      [] {
        // Comma-separated image names per group of kernels (src/backend/cuda/CMakeLists.txt).
        nb::dict images;
#ifdef H3S_CUDA_IMAGES
        images["backend"] = H3S_CUDA_IMAGES;
        images["hopper_kernels"] = H3S_CUDA_IMAGES_SM90;
        images["kvi8s_sm89_kernel"] = H3S_CUDA_IMAGES_SM89;
#endif
        return images;
      },
      "The GPU images this build carries, per group of kernels (empty without CUDA).");
  m.def(
      "cuda_device_image",
      [](int device) {
        const h3s::CudaDeviceImage image = h3s::cuda_device_image(device);
        nb::dict d;
        d["name"] = image.name;
        d["compute_capability"] = image.compute_capability;
        d["binary_version"] = image.binary_version;
        d["ptx_version"] = image.ptx_version;
        return d;
      },
      nb::arg("device"),
      "Which image device `device` runs: its name, compute capability and the backend "
      "kernels' machine-code and PTX versions as loaded (creates its CUDA context).");
  h3s::py::bind_errors(m);
  h3s::py::bind_options(m);
  h3s::py::bind_engine(m);
  h3s::py::bind_checkpoint(m);
  h3s::py::bind_quant(m);
  h3s::py::bind_rng(m);
}
