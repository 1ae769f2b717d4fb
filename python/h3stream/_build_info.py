"""build_info(): what this h3stream was built from and for, and which GPU image the
machine's GPU runs."""

from ._load import native


def _version(v):
    """13000 -> "13.0" (CUDA's 1000 * major + 10 * minor); 0 -> None."""
    return f"{v // 1000}.{v % 1000 // 10}" if v > 0 else None


def _images(text):
    return [i for i in text.split(",") if i]


def device_image_name(sass, binary_version, ptx_version):
    """The image a device runs, from the probe's versions: "sm_86" for machine code
    this build ships, "compute_80 PTX compiled by the driver for sm_120" otherwise,
    None when no image loads."""
    if binary_version <= 0:
        return None
    if ptx_version == binary_version:
        for name in (f"sm_{binary_version}", f"sm_{binary_version}a"):
            if name in sass:
                return name
    return f"compute_{ptx_version} PTX compiled by the driver for sm_{binary_version}"


def build_info(device=0):
    """A dict: ``version``, ``git_commit`` (the commit built, "-dirty" when tracked
    files differed from it, "unknown" outside a git checkout) and ``cuda``: None for a
    CPU-only build, else ``runtime`` (CUDA version linked in), ``driver`` (the newest
    CUDA the installed driver supports; None without a driver), ``sass`` and ``ptx``
    (the backend's images), ``hopper_kernels`` and ``kvi8s_sm89_kernel`` (the images
    of the kernels built for fewer GPUs), and ``device``: for CUDA device ``device``
    (None: skip the query, which creates the device's CUDA context) its ``name``,
    ``compute_capability`` and ``image``, the image its kernels run; None without a
    visible GPU."""
    info = {"version": native.__version__, "git_commit": native.GIT_COMMIT, "cuda": None}
    if not native.cuda_built():
        return info
    images = {k: _images(v) for k, v in native.cuda_images().items()}
    backend = images.get("backend", [])
    cuda = {
        "runtime": _version(native.cuda_runtime_version()),
        "driver": _version(native.cuda_driver_version()),
        "sass": [i for i in backend if i.startswith("sm_")],
        "ptx": [i for i in backend if i.startswith("compute_")],
        "hopper_kernels": images.get("hopper_kernels", []),
        "kvi8s_sm89_kernel": images.get("kvi8s_sm89_kernel", []),
        "device": None,
    }
    if device is not None and 0 <= device < native.cuda_device_count():
        d = native.cuda_device_image(device)
        cc = d["compute_capability"]
        cuda["device"] = {
            "index": device,
            "name": d["name"],
            "compute_capability": f"{cc // 10}.{cc % 10}",
            "image": device_image_name(cuda["sass"], d["binary_version"], d["ptx_version"]),
        }
    info["cuda"] = cuda
    return info
