// Engine errors as Python exceptions: a bad value the caller can fix is a
// ValueError (the message names the value and the fix), a budget overrun a
// MemoryError, an engine bug a RuntimeError.
#include <nanobind/nanobind.h>

#include "core/error.hpp"
#include "python/bindings.hpp"

namespace h3s::py {

namespace nb = nanobind;

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.kind()) {
        case ErrorKind::invalid_argument:
        case ErrorKind::bad_input:
          PyErr_SetString(PyExc_ValueError, e.what());
          break;
        case ErrorKind::out_of_memory:
          PyErr_SetString(PyExc_MemoryError, e.what());
          break;
        case ErrorKind::internal:
          PyErr_SetString(PyExc_RuntimeError, e.what());
          break;
      }
    }
  });
}

}  // namespace h3s::py
