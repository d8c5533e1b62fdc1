"""torch_info.py — which PyTorch a benchmark ran on, for the RESULT lines of bench/torch_*.py.

Import it before torch (it silences the NumPy warning a torch wheel prints when NumPy
is absent — the benchmarks never use NumPy), then append settings() to a RESULT line:

    from torch_info import settings   # bench/ is on sys.path when a script there runs
    import torch
    print(f"RESULT bench=torch_x ... {settings()}")

settings() is "torch=<version> blas=<mkl|openblas|...> onednn=<version|none>
threads=<n> interop=<n> isa=<cpu capability>": key=value pairs without spaces, so the
compare scripts (and people) can read them like the rest of the line.
"""
import re
import warnings

warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy")

import torch  # noqa: E402  (after the filter above)


def _config():
    try:
        return torch.__config__.show()
    except Exception:  # a build without it: report what we can
        return ""


def blas():
    """The BLAS that torch's matmul calls: 'mkl' on PyPI's x86 wheels, 'open' (OpenBLAS),
    'generic' (Debian's 1.13 through libblas.so.3), ... as the build recorded it."""
    m = re.search(r"BLAS_INFO=([^,\s]+)", _config())
    name = m.group(1) if m else "unknown"
    return "openblas" if name == "open" else name


def onednn():
    """oneDNN's (formerly MKL-DNN's) version, or 'none' when torch is built without it."""
    if not torch.backends.mkldnn.is_available():
        return "none"
    m = re.search(r"(?:MKL-DNN|oneDNN)\s+v?([0-9][0-9.]*)", _config())
    return m.group(1) if m else "unknown"


def settings():
    """The key=value pairs that say which torch ran, with what BLAS and how many threads
    (intra-op: torch.get_num_threads(), set by --threads; inter-op: the pool for
    independent ops, which these single-stream benchmarks barely use)."""
    try:
        isa = torch.backends.cpu.get_cpu_capability()  # e.g. AVX2, AVX512
    except AttributeError:  # torch < 2.0
        isa = "unknown"
    version = torch.__version__.replace(" ", "_")
    return (f"torch={version} blas={blas()} onednn={onednn()} "
            f"threads={torch.get_num_threads()} interop={torch.get_num_interop_threads()} "
            f"isa={isa}")


if __name__ == "__main__":
    print(settings())
