// The native half of the `h3stream` Python package: h3stream._h3stream. The
// pure-Python half (python/h3stream) wraps it with the documented API.
#include <nanobind/nanobind.h>

#include "backend/attn_tile.hpp"
#include "python/bindings.hpp"
#include "runtime/engine_backend.hpp"

NB_MODULE(_h3stream, m) {
  m.doc() = "h3stream native module: exact streamed MiniMax-H3 DiT blocks over DLPack tensors";
  m.attr("__version__") = H3S_VERSION;
  // kv_block must be 0 or a multiple of it (the ComfyUI node's step).
  m.attr("ATTN_KV_TILE") = h3s::kAttnKvTile;
  m.def("cuda_built", &h3s::cuda_built,
        "True when this build has the CUDA backend (a GPU may still be missing).");
  m.def("cuda_device_count", &h3s::cuda_device_count,
        "Visible CUDA devices (0 without the CUDA backend, a driver or a device).");
  h3s::py::bind_errors(m);
  h3s::py::bind_options(m);
  h3s::py::bind_engine(m);
  h3s::py::bind_checkpoint(m);
  h3s::py::bind_quant(m);
  h3s::py::bind_rng(m);
}
