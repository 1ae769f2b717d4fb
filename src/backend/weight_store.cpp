// Residency names (weight_store.hpp).
#include "backend/weight_store.hpp"

namespace h3s {

std::string_view residency_name(Residency r) {
  switch (r) {
    case Residency::resident:
      return "resident";
    case Residency::streamed:
      return "streamed";
    case Residency::borrowed:
      return "borrowed";
  }
  return "?";
}

}  // namespace h3s
