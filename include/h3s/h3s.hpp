// The h3stream C++ API: everything a program embedding h3stream includes.
// (C and other languages: h3s/h3s.h.)
#pragma once

#include "h3s/array.hpp"
#include "h3s/arrays_io.hpp"
#include "h3s/dtype.hpp"
#include "h3s/engine.hpp"
#include "h3s/error.hpp"
#include "h3s/forward.hpp"
#include "h3s/kv_tier.hpp"
#include "h3s/options.hpp"
