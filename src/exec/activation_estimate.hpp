// An upper estimate of a forward's activation peak (arena bytes), from the
// same buffers the executors allocate, so a device budget can be split
// between weights and activations before any work (weight_feed.hpp). It is
// an estimate, not the planner of the placement work: it may exceed the
// measured peak (tests bound by how much), never fall short of it.
#pragma once

#include <cstddef>

#include "h3s/options.hpp"
#include "model/config.hpp"
#include "model/packed_layout.hpp"

namespace h3s {

size_t estimate_activation_peak(const ModelConfig& c, const PackedLayout& layout,
                                const ExecOptions& options);

}  // namespace h3s
