// The pieces of the _h3stream extension module, one file each.
#pragma once

#include <nanobind/nanobind.h>

namespace h3s::py {

void bind_errors(nanobind::module_& m);      // py_errors.cpp: h3s::Error -> ValueError & co.
void bind_options(nanobind::module_& m);     // py_options.cpp: Options (ExecOptions)
void bind_engine(nanobind::module_& m);      // py_engine.cpp: _Engine (BlockEngine)
void bind_checkpoint(nanobind::module_& m);  // py_checkpoint.cpp: make_checkpoint
void bind_quant(nanobind::module_& m);       // py_quant.cpp: convrot_quantize
void bind_rng(nanobind::module_& m);         // py_rng.cpp: torch's CPU randn stream (tests)

}  // namespace h3s::py
