// torch's CPU normal stream (core/torch_randn), bound for the tests that
// measure it against torch itself.
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include "core/torch_randn.hpp"
#include "python/bindings.hpp"

namespace h3s::py {

namespace nb = nanobind;
using namespace nb::literals;

void bind_rng(nb::module_& m) {
  m.def("_torch_cpu_rand", &torch_cpu_rand, "seed"_a, "n"_a,
        "torch.rand(n, generator=torch.Generator('cpu').manual_seed(seed)), bit-exact.");
  m.def("_torch_cpu_randn", &torch_cpu_randn, "seed"_a, "n"_a,
        "torch.randn(n, ...) for n >= 16: torch's stream and pairing, libm transcendentals "
        "(the keyframe noise of Engine.forward).");
}

}  // namespace h3s::py
