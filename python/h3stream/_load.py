"""Loads the native extension h3stream._h3stream, or says exactly why not: in one line
when the module is missing, and when a CUDA build meets a driver too old for its
runtime (the CUDA backend could not start there)."""

# The oldest driver branch of each CUDA major version (minor versions of one major
# run on its first driver: CUDA's minor version compatibility).
DRIVER_FOR_CUDA = {12: "R525", 13: "R580"}


def cuda_driver_problem(runtime_version, driver_version):
    """One line saying why a build linking CUDA runtime `runtime_version` cannot run on
    a driver supporting CUDA `driver_version` (both 1000 * major + 10 * minor), or None
    when it can. No CUDA backend (0) or no driver at all (0: a CPU machine) is no
    problem: the CPU backend runs."""
    if runtime_version <= 0 or driver_version <= 0:
        return None
    major = runtime_version // 1000
    if driver_version // 1000 >= major:
        return None
    branch = DRIVER_FOR_CUDA.get(major, f"the first driver of CUDA {major}")
    return (f"h3stream: this build's CUDA {major}.{runtime_version % 1000 // 10} runtime needs an "
            f"NVIDIA driver for CUDA {major}.0 or newer ({branch} or newer), but the installed "
            f"driver supports CUDA {driver_version // 1000}.{driver_version % 1000 // 10}: update "
            "the NVIDIA driver, or install a CPU-only h3stream wheel "
            "(scripts/build-wheel.sh --cpu)")


try:
    from . import _h3stream as native
except ImportError as e:  # re-raised with the reason and the fix
    raise ImportError(
        f"h3stream: the native module h3stream._h3stream could not be loaded ({e}). "
        "Build and install it from the h3stream repository root with `pip install .` "
        "(needs CMake, Ninja, g++ and the packages of scripts/setup-deps.sh), or install "
        "a wheel (scripts/build-wheel.sh)."
    ) from e

_problem = cuda_driver_problem(native.cuda_runtime_version(), native.cuda_driver_version())
if _problem is not None:
    raise ImportError(_problem)
