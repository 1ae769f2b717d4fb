"""Loads the native extension h3stream._h3stream, or says exactly why not."""

try:
    from . import _h3stream as native
except ImportError as e:  # re-raised with the reason and the fix
    raise ImportError(
        f"h3stream: the native module h3stream._h3stream could not be loaded ({e}). "
        "Build and install it from the h3stream repository root with `pip install .` "
        "(needs CMake, Ninja, g++ and the packages of scripts/setup-deps.sh)."
    ) from e
